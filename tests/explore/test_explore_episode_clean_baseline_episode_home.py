"""A correct episode (`baseline_episode_home:RepairEpisode`) explores clean: no false failure.

One file per search: each takes minutes, and files are what the suite's workers share out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from explore_helpers import check_clean


@pytest.mark.slow
def test_it_explores_clean_for_the_budget(tmp_path: Path) -> None:
    """No invariant breaks within the budget and seed; the coverage line is printed, no finding written."""
    check_clean("baseline_episode_home:RepairEpisode", tmp_path, "episode")
