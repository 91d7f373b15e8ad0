"""``pytest-e2b-env smoke reward|episode [--live]``: run one subject's smoke and print a JSON receipt."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pytest_e2b_env.errors import E2BEnvError, MissingExtraError
from pytest_e2b_env.extras import require


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env smoke",
        description="Score fixed candidates (reward) or run two scripted episodes; print a receipt.",
    )
    parser.add_argument("subject", choices=["reward", "episode"])
    parser.add_argument("--live", action="store_true", help="run against real E2B (needs E2B_API_KEY)")
    args = parser.parse_args(argv)
    if args.subject == "episode":
        try:
            require("episode", "pytest-e2b-env smoke episode")
        except MissingExtraError as exc:
            print(f"pytest-e2b-env smoke: error: {exc}", file=sys.stderr)
            return 2
    try:
        if args.subject == "reward":
            from pytest_e2b_env.reward.smoke import reward_smoke

            receipt = reward_smoke(live=args.live)
        else:
            from pytest_e2b_env.episode.smoke import episode_smoke

            receipt = episode_smoke(live=args.live)
    except E2BEnvError as exc:
        print(f"pytest-e2b-env smoke {args.subject}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(receipt, indent=2, sort_keys=True))
    return 0 if receipt.get("ok", True) else 1
