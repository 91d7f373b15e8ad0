"""Is the catalog fair? Every correct sample passes it, every defective sample is caught.

Two kinds of sample subject live in one folder (``fixtures/subjects``):

* defective ones carry ``BUG`` (one sentence) and ``CAUGHT_BY`` (the family meant to catch it):
  the older ``reward_*.py`` / ``episode_*.py`` files (``factory`` / ``Subject``), and any entry of
  ``samples.toml`` whose file has those constants (single-defect variants of a baseline);
* baselines (``samples.toml`` entries without them): correct code written in other people's shapes,
  which must pass the whole catalog of its kind with only the policies it names relaxed.

Each sample runs in its own ``validate`` subprocess, so one subject's servers and sandboxes never
meet another's. That session is hermetic: it runs in an empty directory (the invoking project's
pytest config, its ``e2b_*`` keys and extra cases, never reach a sample) with only this plugin
loaded (pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``): a sample's verdicts depend on the sample
and the catalog alone, and a session skips the plugins' start-up (hypothesis's alone is about 1.4 s
of CPU at its terminal summary). ``python -m pytest_e2b_env.catalog.catch fixtures/subjects``
prints both tables.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_e2b_env.environ import snapshot

MANIFEST = "samples.toml"


@dataclass
class Sample:
    """One sample subject: where it is, what it is, and what it expects of the catalog."""

    path: Path
    spec: str
    kind: str
    relax: list[str] = field(default_factory=list)
    bug: str | None = None
    caught_by: str | None = None

    @property
    def defective(self) -> bool:
        """A sample with a known bug (it must be caught), else a baseline (it must pass)."""
        return self.caught_by is not None


@dataclass
class Outcome:
    """What one validate run of a sample gave."""

    sample: Sample
    counts: dict[str, int] = field(default_factory=dict)
    failed_cases: list[str] = field(default_factory=list)
    failed_families: list[str] = field(default_factory=list)
    relaxed_cases: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: why each failed case failed (its recorded reason and the failed criteria's expected and
    #: observed values), so a false failure can be read at once
    reasons: dict[str, str] = field(default_factory=dict)
    #: where the bundle of a baseline that failed a case was kept (``keep=``)
    kept: Path | None = None
    exit_code: int = 0
    seconds: float = 0.0
    problem: str | None = None

    @property
    def caught(self) -> bool:
        """Caught by a case of the family meant for it."""
        return self.sample.caught_by in self.failed_families

    @property
    def clean(self) -> bool:
        """No case failed or errored and the run itself went through."""
        return self.problem is None and not self.failed_cases


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


def _kind(name: str) -> str:
    """``reward`` or ``episode``: the first word after ``baseline_`` (``baseline_episode_reward_attr``)."""
    return "reward" if name.removeprefix("baseline_").startswith("reward") else "episode"


def discover(root: Path) -> list[Sample]:
    """Every sample under ``root``: the named defective files, then the manifest's entries."""
    samples = []
    for path in sorted(root.glob("*.py")):
        if path.stem.startswith(("reward_", "episode_")):
            meta = constants(path)
            kind = _kind(path.stem.split("_", 1)[0])
            attr = "factory" if kind == "reward" else "Subject"
            samples.append(
                Sample(
                    path, f"{path.stem}:{attr}", kind, bug=meta.get("BUG"), caught_by=meta.get("CAUGHT_BY")
                )
            )
    manifest = root / MANIFEST
    if manifest.exists():
        for name, entry in tomllib.loads(manifest.read_text(encoding="utf-8")).items():
            path = root / f"{entry['spec'].partition(':')[0]}.py"
            meta = constants(path)
            samples.append(
                Sample(
                    path,
                    entry["spec"],
                    _kind(name),
                    relax=list(entry.get("relax", [])),
                    bug=meta.get("BUG"),
                    caught_by=meta.get("CAUGHT_BY"),
                )
            )
    return samples


def _failed_criteria(bundle: Path, case_id: str) -> str:
    """The failed criteria of a case with what each expected and saw, from its report (bounded)."""
    try:
        report = json.loads((bundle / "cases" / case_id / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    parts = [
        f"{c.get('id')}: expected {json.dumps(c.get('expected'))[:120]}, "
        f"got {json.dumps(c.get('actual'))[:200]}"
        for c in report.get("criteria", [])
        if not c.get("passed") and not c.get("relaxed")
    ]
    return "; ".join(parts)


def run_sample(
    sample: Sample,
    *,
    families: list[str] | None = None,
    first_failure: bool = False,
    keep: Path | None = None,
    timeout: float = 900,
) -> Outcome:
    """Run the catalog of the sample's kind (optionally only some families) against it.

    ``first_failure`` stops the run at the first failed case (pytest's ``-x``): enough to tell
    that a defect is caught, and the rest of its family is not waited for. With ``keep``, the
    bundle of a baseline that failed a case (a false failure) is copied there to be read later.
    """
    outcome = Outcome(sample)
    with tempfile.TemporaryDirectory(prefix="pe2b-catch-") as tmp:
        out, cwd = Path(tmp) / "ev", Path(tmp) / "project"  # an empty project: no config of anyone's
        cwd.mkdir()
        cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", sample.kind, "-q"]
        cmd += ["--output", str(out), f"--{sample.kind}-subject", sample.spec]
        if sample.relax:
            cmd += ["--relax", ",".join(sample.relax)]
        if families:
            cmd += ["-k", " or ".join(families)]
        # One case at a time per sample: samples already run side by side (run_all), and a
        # sample's fixed timing constants were written for a machine that is not oversubscribed.
        cmd += ["--", "--e2b-lanes", "1", "-p", "pytest_e2b_env.plugin"] + (["-x"] if first_failure else [])
        env = snapshot()  # samples start from threads (run_all) while pytest's thread sets its variables
        here = str(sample.path.parent.resolve())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # this plugin only (loaded by -p above)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
            outcome.exit_code = proc.returncode
        except subprocess.TimeoutExpired:
            outcome.problem = f"validate did not finish within {timeout:g}s"
            return outcome
        finally:
            outcome.seconds = round(time.monotonic() - started, 2)
        found = list(out.iterdir()) if out.is_dir() else []
        bundles = [p for p in found if p.is_dir() and not p.name.startswith(".")]
        if len(bundles) != 1:
            outcome.problem = (
                f"expected one bundle, found {len(bundles)}: {(proc.stdout + proc.stderr)[-800:]}"
            )
            return outcome
        coverage = json.loads((bundles[0] / "coverage.json").read_text(encoding="utf-8"))
        for case in coverage["cases"]:
            status = case["status"]
            outcome.counts[status] = outcome.counts.get(status, 0) + 1
            if status in ("failed", "error", "missing"):
                outcome.failed_cases.append(case["id"])
                reason = str(case.get("reason") or status)[:300]
                detail = _failed_criteria(bundles[0], case["id"])  # read while the bundle exists
                outcome.reasons[case["id"]] = f"{reason} ({detail})" if detail else reason
                if case["family"] not in outcome.failed_families:
                    outcome.failed_families.append(case["family"])
            elif status == "relaxed":
                outcome.relaxed_cases.append(case["id"])
            elif status == "skipped":
                outcome.skipped[case["id"]] = str(case.get("reason") or "")
        if keep is not None and outcome.failed_cases and not sample.defective:
            outcome.kept = keep / sample.spec.replace(":", "-")
            shutil.copytree(bundles[0], outcome.kept, dirs_exist_ok=True)
    return outcome


def run_all(
    samples: list[Sample],
    *,
    every_family: bool = False,
    parallel: int = 2,
    first_catch: bool = False,
    keep: Path | None = None,
) -> list[Outcome]:
    """Run every sample (baselines on the whole catalog; defects on their family unless ``every_family``).

    ``first_catch``: a defect's run stops at its first failed case (the table then lists only
    that case); baselines always run every case. ``keep``: see :func:`run_sample`.
    """

    def one(sample: Sample) -> Outcome:
        families = None if every_family or not sample.defective else [str(sample.caught_by)]
        return run_sample(
            sample, families=families, first_failure=first_catch and sample.defective, keep=keep
        )

    # Two at a time: most of a run is spent waiting on deadlines and kill confirmations.
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(one, samples))


def tables(outcomes: list[Outcome]) -> str:
    """The catch table (defective samples) and the clean table (baselines), as printed."""
    lines = ["catch table: defective samples (each must fail a case of its family)"]
    defects = [o for o in outcomes if o.sample.defective]
    for o in defects:
        mark = "CAUGHT" if o.caught else ("caught elsewhere" if o.failed_cases else "MISSED")
        lines.append(
            f"  {o.sample.spec:<58} {o.sample.caught_by:<16} {mark:<17} {o.seconds:6.1f}s  "
            + ",".join(o.failed_cases)
        )
        if o.problem:
            lines.append(f"      problem: {o.problem}")
    caught = sum(o.caught for o in defects)
    lines.append(f"  catch rate (intended family): {caught}/{len(defects)}")
    lines.append("clean table: correct samples in other people's shapes (no case may fail)")
    baselines = [o for o in outcomes if not o.sample.defective]
    for o in baselines:
        counts = " ".join(f"{k}={v}" for k, v in sorted(o.counts.items()))
        mark = "CLEAN" if o.clean else "FALSE FAILURE"
        lines.append(f"  {o.sample.spec:<58} {mark:<14} {counts}  {o.seconds:6.1f}s")
        lines.append(f"      relaxed: {', '.join(o.sample.relax) or 'none'}")
        for case_id in o.failed_cases:
            lines.append(f"      failed: {case_id}: {o.reasons.get(case_id, '')}")
        for case_id, reason in o.skipped.items():
            lines.append(f"      skipped: {case_id}: {reason}")
        if o.problem:
            lines.append(f"      problem: {o.problem}")
    clean = sum(o.clean for o in baselines)
    lines.append(f"  clean: {clean}/{len(baselines)}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print both tables for every sample under a directory; non-zero unless all are as expected."""
    every = "--all-families" in argv
    paths = [a for a in argv if not a.startswith("--")]
    root = Path(paths[0]) if paths else Path("fixtures/subjects")
    outcomes = run_all(discover(root), every_family=every)
    print(tables(outcomes))
    ok = all(o.caught for o in outcomes if o.sample.defective) and all(
        o.clean for o in outcomes if not o.sample.defective
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
