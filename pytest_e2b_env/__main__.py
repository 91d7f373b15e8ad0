import sys

from pytest_e2b_env.cli import main

sys.exit(main())
