"""explore finds, shrinks and replays `explore_episode_verifier_retry`, an episode defect the catalog misses.

One file per defect: each search takes minutes, and files are what the suite's workers share out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from explore_helpers import check_found


@pytest.mark.slow
def test_explore_finds_shrinks_and_replays_it(tmp_path: Path) -> None:
    """Within budget and seed the break is found, written, shrunk so each step is needed, and replayed."""
    check_found("explore_episode_verifier_retry:VerifierRetryEpisode", tmp_path)
