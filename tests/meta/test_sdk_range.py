"""Both ends of the e2b SDK range pyproject.toml allows, each in a fresh venv, against the emulator.

The emulator serves the SDK's own wire protocol from the SDK's own generated stubs, so a release
inside the range that changes either breaks the emulator, not only a caller. Each end gets a venv
with the built wheel and the SDK at that end (the lowest: every lower bound exactly; the newest:
the range as a user's resolver reads it), then runs the emulator's SDK contract tests and the
package's own list/kill/sweep path from a copy of the suite, outside the checkout, so only the
installed package answers, and the bundled reward code through the reward catalog (the package's
own SDK calls under every fault). Slow: two installs from the package index, about 2 minutes each.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from install_helpers import INSTALL_TIMEOUT, ROOT, build_wheel, clean_env, make_venv, run
from packaging.requirements import Requirement
from packaging.version import Version

pytestmark = pytest.mark.slow

SDK = ("e2b", "e2b-code-interpreter")
#: The SDK's contract as the emulator serves it (sync and async, commands, files, the code
#: interpreter, lifetimes, wire faults, control) and the package's own SDK calls (tags: list,
#: kill and confirm, sweep).
SUITE = (
    "tests/conftest.py",
    "tests/emulator/conftest.py",
    "tests/emulator/emu_helpers.py",
    "tests/emulator/test_emu_commands.py",
    "tests/emulator/test_emu_files.py",
    "tests/emulator/test_emu_async.py",
    "tests/emulator/test_emu_control.py",
    "tests/emulator/test_emu_lifecycle.py",
    "tests/emulator/test_emu_faults.py",
    "tests/emulator/test_code_interpreter.py",
    "tests/emulator/test_code_interpreter_async.py",
    "tests/targets/test_tags.py",
)
#: What the suite's pytest config names besides the package (asyncio_mode, timeout, a hypothesis filter).
TEST_TOOLS = ("pytest-asyncio", "pytest-timeout", "hypothesis")
#: The one skip reason a contract test may give, at the low end only (emu_helpers.needs_sdk).
SDK_SKIP = re.compile(r"^e2b \S+ has no .+ \(e2b \d+\.\d+\+\)$")
VERSIONS = (
    "import json, importlib.metadata as m, pytest_e2b_env; "
    "print(json.dumps({'package': pytest_e2b_env.__file__, "
    "**{n: m.version(n) for n in ('e2b', 'e2b-code-interpreter', 'connectrpc', 'protobuf-py')}}))"
)


def sdk_requirements() -> dict[str, Requirement]:
    """The SDK's requirements as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {Requirement(text).name: Requirement(text) for text in project["dependencies"]}
    return {name: found[name] for name in SDK}


def lower_bound(requirement: Requirement) -> str:
    """The version of the requirement's ``>=`` bound (each SDK requirement must have one)."""
    (bound,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    return bound


def test_every_sdk_requirement_is_a_range_below_the_next_major() -> None:
    """Each SDK requirement has a lower bound and allows every later release below the next major."""
    for name, requirement in sdk_requirements().items():
        low = Version(lower_bound(requirement))
        upper = [spec for spec in requirement.specifier if spec.operator == "<"]
        assert [str(spec) for spec in upper] == [f"<{low.major + 1}"], name
        assert requirement.specifier.contains(f"{low.major}.999"), name


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """Scratch space for the wheel and both venvs, removed at the end."""
    path = Path(tempfile.mkdtemp(prefix="pytest-e2b-env-sdk-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(work: Path) -> Path:
    """The project's wheel, built once from a copy of the checkout."""
    return build_wheel(work / "wheel")


def _suite(dest: Path) -> Path:
    """A copy of the contract tests and the project's pytest config, away from the package sources."""
    for name in (*SUITE, "pyproject.toml"):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.timeout(2700)  # three phases of at most 900 s each: the install, the tests, the catalog
@pytest.mark.parametrize("end", ["lowest", "newest"])
def test_emulator_contract_holds_at_each_end_of_the_sdk_range(end: str, work: Path, wheel: Path) -> None:
    """The emulator's SDK contract tests and the reward catalog pass at both ends of the SDK range."""
    requirements = sdk_requirements()
    if end == "lowest":
        pins = [f"{name}=={lower_bound(req)}" for name, req in requirements.items()]
    else:
        pins = [str(req) for req in requirements.values()]
    python = make_venv(work / end)
    env = clean_env()
    installed = run(
        [python, "-m", "pip", "install", "-q", wheel, *pins, *TEST_TOOLS],
        cwd=work,
        env=env,
        timeout=INSTALL_TIMEOUT,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    suite = _suite(work / f"suite-{end}")
    probed = run([python, "-c", VERSIONS], cwd=suite, env=env)
    assert probed.returncode == 0, probed.stderr[-3000:]
    versions = json.loads(probed.stdout)
    assert Path(versions["package"]).is_relative_to(work / end)  # the installed wheel, not the checkout
    for name, requirement in requirements.items():
        assert requirement.specifier.contains(versions[name]), (name, versions[name])
        if end == "lowest":
            assert Version(versions[name]) == Version(lower_bound(requirement))
    print(
        f"{end}: " + ", ".join(f"{name} {versions[name]}" for name in sorted(versions) if name != "package")
    )

    # The project's config names the bundled episode, which needs the [episode] extra: not here.
    options = ["-q", "-rs", "-p", "no:cacheprovider", "-o", "e2b_episode_subject="]
    ran = run(
        [python, "-m", "pytest", *options, *[n for n in SUITE if "/test_" in n]],
        cwd=suite,
        env=env,
        timeout=INSTALL_TIMEOUT,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    print(f"{end}: {summary}")
    # A contract test skips only for an SDK feature newer than the installed release (emu_helpers'
    # needs_sdk), and only at the low end: any other skip would prove nothing about this end.
    skipped = re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", output, re.M)
    assert [r for r in skipped if end == "newest" or not SDK_SKIP.match(r)] == [], skipped

    # The bundled reward code through the whole reward catalog: the package's own SDK calls.
    empty = work / f"catalog-{end}"
    empty.mkdir()
    cli = python.parent / "pytest-e2b-env"
    validated = run(
        [cli, "validate", "--subject", "reward", "-q"], cwd=empty, env=env, timeout=INSTALL_TIMEOUT
    )
    assert validated.returncode == 0, (validated.stdout + validated.stderr)[-6000:]
    print(f"{end}: catalog {validated.stdout.strip().splitlines()[-1]}")
