"""The ledger's create entries carry the sandbox's internet setting (read by the catalog's verdicts)."""

from __future__ import annotations

import pytest
from e2b import Sandbox

from pytest_e2b_env.emulator import Emulator


@pytest.mark.parametrize("internet", [True, False])
def test_create_entry_carries_allow_internet_access(
    emu: Emulator, opts: dict[str, str], internet: bool
) -> None:
    """A create through the real SDK is ledgered with the allow_internet_access the sandbox got."""
    mark = emu.ledger_mark()
    sbx = Sandbox.create(allow_internet_access=internet, **opts)
    sbx.commands.run("true")
    sbx.kill()
    entries = emu.ledger(since=mark)
    creates = [e for e in entries if e["op"] == "create"]
    assert [(e["sandbox_id"], e["allow_internet_access"]) for e in creates] == [(sbx.sandbox_id, internet)]
    assert all("allow_internet_access" not in e for e in entries if e["op"] != "create")
