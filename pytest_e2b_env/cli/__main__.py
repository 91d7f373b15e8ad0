"""``python -m pytest_e2b_env.cli COMMAND``: the console script (the emulator's child runs this way)."""

import sys

from pytest_e2b_env.cli import main

sys.exit(main())
