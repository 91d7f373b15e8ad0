"""junit.xml for the bundle, built with the ``junit-xml`` package, one testcase per catalog case.

Two pitfalls of junit-xml 1.9 are handled here: a failure or error without a message is
silently written as a pass (so every one gets a non-empty message), and control characters
are silently deleted (so they are made visible first). The result is parsed back and its
counts checked against the cases before it is accepted.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

SUITE_NAME = "pytest-e2b-env"
# Characters junit-xml deletes without a trace (its own table: XML-illegal and discouraged
# code points, including CR and C1 controls); they are made visible before it sees them.
_ILLEGAL = [(0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x84), (0x86, 0x9F), (0xD800, 0xDFFF), (0xFDD0, 0xFDDF)]
_ILLEGAL += [(plane + 0xFFFE, plane + 0xFFFF) for plane in range(0, 0x110000, 0x10000)]
_CONTROL = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _ILLEGAL) + "]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """Replace characters junit-xml would silently delete with a visible ``\\xNN`` escape."""
    return _CONTROL.sub(lambda m: _escape(m.group(0)), text)


def name_text(text: str) -> str:
    """A testcase name or classname as written: visible, with tabs and newlines escaped too.

    XML parsers turn a newline inside an attribute into a space, so the name read back would
    no longer be the case id.
    """
    return visible(text).replace("\t", "\\t").replace("\n", "\\n")


#: Testcase properties of a relaxed case (the bundle's junit.xml and pytest's ``--junitxml`` alike).
STATUS_PROPERTY = "e2b_status"
RELAXED_PROPERTY = "e2b_relaxed"


def _failure_message(case: Mapping[str, Any]) -> str:
    """The reason, and the failed criteria unless the reason already lists them (it usually does)."""
    failed = [
        str(c.get("id")) for c in case.get("criteria") or [] if not c.get("passed") and not c.get("relaxed")
    ]
    reason = str(case.get("reason") or "").strip()
    listed = "failed criteria: " + ", ".join(failed) if failed else ""
    message = f"{reason}; {listed}" if reason and listed and listed not in reason else reason or listed
    return visible(message or f"case {case.get('id')} {case.get('status')} without a recorded reason")


def relaxed_note(case: Mapping[str, Any]) -> str:
    """What a relaxed case's testcase says: which criteria failed under which relaxed policies.

    A relaxed case is written as a pass (only policy criteria the user relaxed by name failed), so
    this note and the ``e2b_status`` property are what tell it from a real one.
    """
    relaxed = [c for c in case.get("criteria") or [] if c.get("relaxed")]
    ids = ", ".join(str(c.get("id")) for c in relaxed) or "none recorded"
    policies = (
        ", ".join(sorted({str(c.get("policy")) for c in relaxed if c.get("policy")})) or "none recorded"
    )
    return visible(
        f"relaxed, not passed: policy criteria {ids} failed and e2b_relax relaxes {policies}; "
        "safety criteria all held"
    )


def relaxed_properties(case: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The testcase properties that mark a relaxed case."""
    return [(STATUS_PROPERTY, "relaxed"), (RELAXED_PROPERTY, relaxed_note(case))]


def _details(case: Mapping[str, Any]) -> str:
    lines = []
    for criterion in case.get("criteria") or []:
        mark = "PASS" if criterion.get("passed") else "RELAXED" if criterion.get("relaxed") else "FAIL"
        lines.append(
            f"[{mark}] {criterion.get('id')}: {criterion.get('description')}"
            f" expected={criterion.get('expected')!r} actual={criterion.get('actual')!r}"
        )
    for exc in case.get("exceptions") or []:
        lines.append(f"raised {exc.get('type')}: {exc.get('message')}")
    return visible("\n".join(lines))


def build_junit(cases: Sequence[Mapping[str, Any]], properties: Mapping[str, Any], timestamp: str) -> str:
    """Return junit.xml text: passed/failed/error/skipped/missing cases as testcases with messages.

    ``cases`` are coverage entries merged with their records (``id``, ``subject``, ``family``,
    ``status``, ``reason``, ``criteria``, ``exceptions``, ``seconds``); all text must already be
    redacted. A ``missing`` case is written as an error so CI cannot read it as a pass.
    """
    test_cases = []
    for case in cases:
        status = case.get("status")
        seconds = case.get("seconds")
        test_case = TestCase(
            name=name_text(str(case.get("id"))),
            classname=name_text(
                f"{SUITE_NAME}.{case.get('subject') or 'unknown'}.{case.get('family') or 'unknown'}"
            ),
            elapsed_sec=float(seconds) if isinstance(seconds, int | float) else None,
        )
        if status == "failed":
            test_case.add_failure_info(
                message=_failure_message(case), output=_details(case), failure_type="failed"
            )
        elif status in ("error", "missing"):
            exc_types = [str(e.get("type")) for e in case.get("exceptions") or [] if e.get("type")]
            kind = "missing" if status == "missing" else (exc_types[0] if exc_types else "error")
            test_case.add_error_info(message=_failure_message(case), output=_details(case), error_type=kind)
        elif status == "skipped":
            test_case.add_skipped_info(message=visible(str(case.get("reason") or "skipped without a reason")))
        elif status == "relaxed":
            test_case.stdout = relaxed_note(case)
        test_cases.append(test_case)
    suite = TestSuite(
        SUITE_NAME,
        test_cases,
        timestamp=timestamp,
        properties={str(k): visible(str(v)) for k, v in properties.items()},
    )
    text = _mark_relaxed(to_xml_report_string([suite], prettyprint=True, encoding="utf-8"), cases)
    _check_counts(text, cases)
    return text


def _mark_relaxed(text: str, cases: Sequence[Mapping[str, Any]]) -> str:
    """Give each relaxed case's testcase its properties, first, as pytest writes a testcase's own.

    junit-xml has no testcase properties; the document is parsed back and written again.
    """
    relaxed = {name_text(str(c.get("id"))): c for c in cases if c.get("status") == "relaxed"}
    if not relaxed:
        return text
    root = ET.fromstring(text.encode("utf-8"))
    for testcase in root.iter("testcase"):
        case = relaxed.get(testcase.get("name") or "")
        if case is not None:
            node = ET.Element("properties")
            for name, value in relaxed_properties(case):
                ET.SubElement(node, "property", name=name, value=value)
            testcase.insert(0, node)
    ET.indent(root, space="\t")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def properties_of(testcase: ET.Element) -> dict[str, str]:
    """A testcase's own properties (not the suite's)."""
    node = testcase.find("properties")
    return {} if node is None else {str(p.get("name")): str(p.get("value")) for p in node.iter("property")}


def _check_counts(text: str, cases: Sequence[Mapping[str, Any]]) -> None:
    """Raise if the XML lost a case or turned a failure into a pass (the library's known hazards)."""
    counts = junit_counts(text)
    want = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.get("status") == "failed"),
        "errors": sum(1 for c in cases if c.get("status") in ("error", "missing")),
        "skipped": sum(1 for c in cases if c.get("status") == "skipped"),
    }
    if counts != want:
        raise RuntimeError(f"junit.xml counts {counts} differ from the cases {want}")


def junit_counts(text: str) -> dict[str, int]:
    """Count testcases and their failure/error/skipped children in junit.xml text."""
    root = ET.fromstring(text.encode("utf-8"))
    testcases = list(root.iter("testcase"))
    return {
        "tests": len(testcases),
        "failures": sum(1 for t in testcases if t.find("failure") is not None),
        "errors": sum(1 for t in testcases if t.find("error") is not None),
        "skipped": sum(1 for t in testcases if t.find("skipped") is not None),
    }
