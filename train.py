"""TRL GRPO on the validated reward pool or episode: ``python train.py --help``.

A thin wrapper; the code lives in :mod:`pytest_e2b_env.training` (also ``pytest-e2b-env train``).
"""

from __future__ import annotations

import sys

from pytest_e2b_env.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
