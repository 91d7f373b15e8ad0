"""Does the catalog catch a known-defective subject? (the catch-rate figure)

A defective sample subject is a module with ``BUG`` (one sentence) and ``CAUGHT_BY`` (the
family meant to catch it), exposing ``factory`` (reward) or ``Subject`` (episode). Each one
runs in its own ``validate`` subprocess, so one subject's servers and sandboxes never meet
another's.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Catch:
    """The outcome of running one defective subject against the catalog."""

    subject: str
    kind: str
    bug: str
    caught_by: str
    failed_cases: list[str] = field(default_factory=list)
    failed_families: list[str] = field(default_factory=list)
    exit_code: int = 0
    seconds: float = 0.0
    problem: str | None = None

    @property
    def caught(self) -> bool:
        """Caught by a case of the family meant for it."""
        return self.caught_by in self.failed_families

    @property
    def caught_anywhere(self) -> bool:
        """Caught by any case."""
        return bool(self.failed_cases)


def constants(path: Path) -> dict[str, Any]:
    """``BUG`` and ``CAUGHT_BY`` of a subject file, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("BUG", "CAUGHT_BY"):
                found[name] = ast.literal_eval(node.value)
    return found


def run_subject(path: Path, *, families: list[str] | None = None, timeout: float = 600) -> Catch:
    """Run the catalog (optionally only some families) against one sample subject file."""
    import time

    kind = "reward" if path.name.startswith("reward_") else "episode"
    meta = constants(path)
    spec = f"{path.stem}:{'factory' if kind == 'reward' else 'Subject'}"
    catch = Catch(spec, kind, str(meta.get("BUG", "")), str(meta.get("CAUGHT_BY", "")))
    with tempfile.TemporaryDirectory(prefix="pe2b-catch-") as out:
        cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", kind, "-q"]
        cmd += ["--output", out, f"--{kind}-subject", spec]
        if families:
            cmd += ["-k", " or ".join(families)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path.parent), env.get("PYTHONPATH")) if p)
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            catch.exit_code = proc.returncode
        except subprocess.TimeoutExpired:
            catch.problem = f"validate did not finish within {timeout:g}s"
            return catch
        finally:
            catch.seconds = round(time.monotonic() - started, 2)
        bundles = [p for p in Path(out).iterdir() if p.is_dir() and not p.name.startswith(".")]
        if len(bundles) != 1:
            catch.problem = f"expected one bundle, found {len(bundles)}: {proc.stdout[-800:]}"
            return catch
        coverage = json.loads((bundles[0] / "coverage.json").read_text(encoding="utf-8"))
    for case in coverage["cases"]:
        if case["status"] in ("failed", "error"):
            catch.failed_cases.append(case["id"])
            if case["family"] not in catch.failed_families:
                catch.failed_families.append(case["family"])
    return catch


def main(argv: list[str]) -> int:
    """Print the catch table and rate for every sample subject under a directory."""
    every = "--all-families" in argv
    paths = [a for a in argv if not a.startswith("--")]
    root = Path(paths[0]) if paths else Path("fixtures/subjects")
    rows = []
    for path in sorted(root.glob("*.py")):
        if path.stem.startswith(("reward_", "episode_")):
            # Only the family meant to catch it runs by default (the catalog is long); see --all-families.
            families = None if every else [str(constants(path).get("CAUGHT_BY", "good"))]
            rows.append(run_subject(path, families=families))
    for row in rows:
        mark = "CAUGHT" if row.caught else ("caught elsewhere" if row.caught_anywhere else "MISSED")
        cases = ",".join(row.failed_cases)
        print(f"{row.subject:<42} {row.caught_by:<16} {mark:<17} {row.seconds:6.1f}s  {cases}")
        if row.problem:
            print(f"    problem: {row.problem}")
    caught = sum(r.caught for r in rows)
    anywhere = sum(r.caught_anywhere for r in rows)
    print(f"catch rate (intended family): {caught}/{len(rows)}; caught by any case: {anywhere}/{len(rows)}")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
