"""Code extraction and the host-side syntax check (pure; hypothesis properties)."""

from __future__ import annotations

import asyncio
import gc
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reward_helpers import CANDIDATES

from pytest_e2b_env.reward import extract_code
from pytest_e2b_env.reward.extract import CODE_LIMIT_BYTES, find_code_block, syntax_problem

# Bodies that cannot close or open a fence themselves.
bodies = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits + " =()+-*:'\"#\t", max_size=40), max_size=8
).map(lambda lines: "\n".join(lines) + "\n")
prose = st.text(alphabet=string.ascii_letters + " .,\n", max_size=60)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@given(before=prose, body=bodies, info=st.sampled_from(["", "python", "py", "python3"]), after=prose)
def test_first_qualifying_block_is_extracted(before: str, body: str, info: str, after: str) -> None:
    """The body of a fence with info '', python, py or python3 comes back exactly."""
    text = f"{before}\n```{info}\n{body}```\n{after}"
    assert find_code_block(text) == body


@given(body=bodies, other=bodies, info=st.sampled_from(["json", "bash", "Python", "python2", "text"]))
def test_other_info_strings_are_skipped(body: str, other: str, info: str) -> None:
    """A block with another info string is skipped; the next qualifying block counts."""
    text = f"```{info}\n{other}```\nthen\n```python\n{body}```\n"
    assert find_code_block(text) == body


@given(first=bodies, second=bodies)
def test_only_the_first_qualifying_block_counts(first: str, second: str) -> None:
    """Of two python blocks, the first one is the program."""
    assert find_code_block(f"```python\n{first}```\n```python\n{second}```\n") == first


@given(text=prose)
def test_text_without_fence_is_no_code(text: str) -> None:
    """Prose without a fence scores no_code, never raises."""
    assert extract_code([{"role": "assistant", "content": text}]).reason == "no_code"


@settings(max_examples=200)
@given(value=json_like)
def test_extract_never_raises(value: object) -> None:
    """Any completion shape (non-string content, multi-part, junk) gives a result, never an exception."""
    for completion in (value, [{"role": "assistant", "content": value}], [value]):
        result = extract_code(completion)
        assert (result.code is None) == (result.reason is not None)


def test_multi_part_content_is_bad_content() -> None:
    """Multi-part message content is a 0 with reason bad_content."""
    completion = [{"role": "assistant", "content": [{"type": "text", "text": "```python\nprint(1)\n```"}]}]
    assert extract_code(completion).reason == "bad_content"


def test_last_assistant_message_is_used() -> None:
    """With tool turns, the last assistant message holds the answer."""
    completion = [
        {"role": "assistant", "content": "```python\nprint(1)\n```"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "```python\nprint(2)\n```"},
    ]
    assert extract_code(completion).code == "print(2)\n"


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("pathological_unary_minus", "MemoryError"),
        ("pathological_long_sum", "RecursionError"),
        ("syntax_error", "SyntaxError"),
    ],
)
def test_parser_failures_are_syntax_zero(name: str, detail: str) -> None:
    """MemoryError / RecursionError / SyntaxError in the host parser become reason syntax."""
    source = (CANDIDATES / f"{name}.py").read_text()
    result = extract_code(f"```python\n{source}```")
    assert (result.code, result.reason, result.detail) == (None, "syntax", detail)


@pytest.mark.parametrize(
    ("name", "reason"),
    [("no_fence", "no_code"), ("fence_other_language", "no_code"), ("fence_unclosed", "no_code")],
)
def test_fence_fixtures(name: str, reason: str) -> None:
    """The fence fixture completions carry no program."""
    assert extract_code((CANDIDATES / f"{name}.txt").read_text()).reason == reason


def test_oversized_code_is_rejected() -> None:
    """A program over 64 KiB is code_too_large, not sent anywhere."""
    big = "x = 1\n" * (CODE_LIMIT_BYTES // 6 + 10)
    assert extract_code(f"```python\n{big}```").reason == "code_too_large"


def test_null_byte_and_surrogates_are_syntax() -> None:
    """Sources the parser or UTF-8 cannot take are syntax zeros."""
    assert extract_code("```python\nprint(1)\x00\n```").reason == "syntax"
    assert extract_code("```python\nprint('\ud800')\n```").reason == "syntax"


class _Holder:
    """Something only the cyclic collector frees."""

    task: asyncio.Future[None]
    self: _Holder


async def _fails() -> None:
    raise ConnectionError("stream cut")


def test_a_parse_broken_by_the_interpreter_is_tried_again() -> None:
    """A correct program is no syntax zero when a finalizer logged a traceback during its parse.

    A failed task nobody awaited, in a reference cycle (what a cancelled batch leaves), is freed
    by the collector at some allocation of our parse; its finalizer logs the traceback, whose
    formatting parses too, and CPython 3.11 then raises SystemError from our ``ast.parse``.
    """
    loop = asyncio.new_event_loop()
    was_enabled, threshold = gc.isenabled(), gc.get_threshold()
    gc.disable()
    try:
        holder = _Holder()
        holder.task = loop.create_task(_fails())
        loop.run_until_complete(asyncio.sleep(0.01))
        holder.self = holder
        del holder
        gc.set_threshold(1)  # collect at the first allocation, as a busy process may at any
        gc.enable()
        problem = syntax_problem("import json\nprint(json.dumps({'a': 1}))\n")
    finally:
        gc.set_threshold(*threshold)
        if not was_enabled:
            gc.disable()
        loop.close()
    assert problem is None
