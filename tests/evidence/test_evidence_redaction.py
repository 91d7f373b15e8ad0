"""redact, Redactor and the secret scanner: known values, secret shapes, data, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_e2b_env.evidence import find_secrets, redact
from pytest_e2b_env.evidence.redaction import MARKER, WITHHELD, Redactor, env_secrets, piece_length, pieces

E2B_KEY = "e2b_" + "0a1b2c3d4e5f" * 3 + "6789"
SHAPED = [
    E2B_KEY,
    "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3",
    "sk-ant-" + "api03-A1b2C3d4E5f6G7h8I9j0",
    "AKIA" + "IOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb-" + "123456789012-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
]


@pytest.mark.parametrize("secret", SHAPED)
def test_secret_shapes_are_redacted(secret):
    """Each known credential shape is replaced wherever it appears in text."""
    text = f"before {secret} after"
    assert redact(text) == f"before {MARKER} after"
    assert find_secrets(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer 9f8e7d6c5b4a39281706f5e4", f"Authorization: Bearer {MARKER}"),
        ("X-API-Key: abcd1234efgh", f"X-API-Key: {MARKER}"),
        ("password=hunter22", f"password={MARKER}"),
        ('{"api_key": "zzzz9999"}', f'{{"api_key": "{MARKER}"}}'),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", f"aws_secret_access_key = {MARKER}"),
        ("https://alice:pw123@host/x", f"https://{MARKER}@host/x"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----\nrest",
            f"{MARKER}\nrest",
        ),
        ("-----BEGIN PRIVATE KEY-----\ncut off mid-block", MARKER),
    ],
)
def test_credential_contexts_are_redacted(text, expected):
    """Headers, assignments, URL credentials and private key blocks lose their values, keep context."""
    assert redact(text) == expected


@pytest.mark.parametrize(
    "prose",
    [
        "bearer authentication is described in RFC 6750",
        "the basic password policy",
        "max_tokens=256 and tokenizer=gpt2",
        "sk-learn is a nickname",
        f"already {MARKER} here: password: {MARKER}",
    ],
)
def test_ordinary_text_is_left_alone(prose):
    """Prose and already-redacted text do not look like secrets."""
    assert redact(prose) == prose
    assert find_secrets(prose) == []


def test_environment_values_are_redacted(monkeypatch):
    """Values of E2B_API_KEY, *_KEY, *_TOKEN, *_SECRET and password variables go; short ones are ignored."""
    monkeypatch.setenv("E2B_API_KEY", "plain-looking-value-1")
    monkeypatch.setenv("MY_SECRET", "another-value-22")
    monkeypatch.setenv("DB_PASSWORD", "correct-horse")
    monkeypatch.setenv("FEATURE_TOKEN", "1")
    monkeypatch.setenv("HOME_DIR_NAME", "not-a-secret-name")
    assert {"plain-looking-value-1", "another-value-22", "correct-horse"} <= set(env_secrets())
    assert "1" not in env_secrets()
    text = "a plain-looking-value-1 b another-value-22 c correct-horse d not-a-secret-name"
    assert redact(text) == f"a {MARKER} b {MARKER} c {MARKER} d not-a-secret-name"
    assert any("value of $E2B_API_KEY" in f for f in find_secrets(text))


def test_longest_secret_wins():
    """When one secret contains another, the whole longer one is replaced."""
    assert redact("xx abcdefgh-longer yy", ["abcdefgh", "abcdefgh-longer"]) == f"xx {MARKER} yy"


def test_data_redaction_covers_keys_values_and_secret_named_fields():
    """Redactor.data walks dicts and lists, redacts keys too, and blanks credential-named fields."""
    data = {"api_key": "anything", "tokenizer": "gpt2", "nested": [{"msg": f"use {E2B_KEY}"}], E2B_KEY: 1}
    assert Redactor().data(data) == {
        "api_key": MARKER,
        "tokenizer": "gpt2",
        "nested": [{"msg": f"use {MARKER}"}],
        MARKER: 1,
    }


def test_findings_never_repeat_the_secret():
    """Scanner findings name the kind and offset only."""
    findings = find_secrets(f"x {E2B_KEY} y topsecretvalue", ["topsecretvalue"])
    assert findings == ["a secret value passed by the caller at offset 49", "e2b key at offset 2"]
    assert all(E2B_KEY not in f and "topsecretvalue" not in f for f in findings)


# -- properties --------------------------------------------------------------------------------

SEPARATORS = [" ", "\n", "\t", "(", '"']
secret_values = st.text(min_size=4, max_size=40).filter(
    lambda s: s not in MARKER and s not in WITHHELD and s.strip() == s
)
texts = st.text(max_size=200)


@settings(max_examples=300, deadline=None)
@given(prefix=texts, suffix=texts, secret=secret_values)
def test_planted_secret_never_survives(prefix, suffix, secret):
    """Whatever surrounds it, a caller's secret is never in redact()'s output, raw or JSON-escaped."""
    out = redact(prefix + secret + suffix, [secret])
    assert secret not in out
    assert find_secrets(out, [secret]) == []


@settings(max_examples=200, deadline=None)
@given(
    prefix=texts,
    suffix=texts,
    shape=st.sampled_from(SHAPED),
    sep=st.sampled_from([" ", "\n", "\t", "(", '"']),
)
def test_planted_shape_never_survives(prefix, suffix, shape, sep):
    """A secret-shaped string between any text and a separator is always redacted."""
    out = redact(prefix + sep + shape + sep + suffix)
    assert shape not in out


@settings(max_examples=200, deadline=None)
@given(text=texts, secrets=st.lists(secret_values, max_size=3))
def test_redaction_is_idempotent(text, secrets):
    """Redacting twice changes nothing more than redacting once."""
    once = redact(text, secrets)
    assert redact(once, secrets) == once


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,!?\n", max_size=300))
def test_plain_text_is_unchanged(text):
    """Text with no secret and nothing secret-shaped passes through untouched."""
    assert redact(text) == text


@settings(max_examples=100, deadline=None)
@given(
    secret=secret_values,
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | texts,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=10,
    ),
)
def test_data_redaction_removes_secret_from_json(secret, value):
    """A secret planted anywhere in JSON data is in none of the redacted data's strings."""
    planted = {"payload": value, "leak": [secret, {secret: f"x{secret}x"}]}
    redacted = Redactor([secret]).data(planted)
    assert all(secret not in text for text in _strings(redacted))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_remembered_short_strings_are_redacted_alike_and_bounded():
    """A short string seen again gets the same redaction; what is remembered has a bound."""
    from pytest_e2b_env.evidence import redaction

    redactor = Redactor(["s3cr3t-value-123"])
    record = {"token": "x", "note": "key s3cr3t-value-123", "kind": "call"}
    first, again = redactor.data(record), redactor.data(dict(record))
    assert first == again
    assert "s3cr3t-value-123" not in repr(again)
    for n in range(redaction.MAX_REMEMBERED + 10):
        redactor.text(f"id-{n}")
    assert len(redactor._seen) == redaction.MAX_REMEMBERED
    assert redactor.text("auth=s3cr3t-value-123") == redactor.text("auth=s3cr3t-value-123")
    assert "s3cr3t" not in redactor.text("auth=s3cr3t-value-123")


# -- pieces of a secret a cut left ---------------------------------------------------------------

CUT_SECRET = "tok4" + "9f1c2b7a3e6d8054" * 2 + "q7Zx"  # 40 characters: pieces of 20 or more count


def test_piece_length_is_twelve_characters_or_half_the_secret():
    """A piece counts from 12 characters, or half the secret when that is longer; short ones have none."""
    assert piece_length("a" * 13) == 12
    assert piece_length(CUT_SECRET) == 20
    assert piece_length("b" * 41) == 21
    assert pieces("c" * 12) is None
    assert pieces(CUT_SECRET) == (CUT_SECRET[:20], CUT_SECRET[-20:])


@pytest.mark.parametrize("kept", [20, 39])
def test_a_cut_piece_of_a_secret_is_redacted_whole(kept):
    """What a cut left of a secret, its prefix or its suffix however long, is replaced by one marker."""
    head = f"message: {CUT_SECRET[:kept]}"
    tail = f"{CUT_SECRET[-kept:]} (end)"
    assert redact(head, [CUT_SECRET]) == f"message: {MARKER}"
    assert redact(tail, [CUT_SECRET]) == f"{MARKER} (end)"
    short = f"{CUT_SECRET[:19]} {CUT_SECRET[-19:]}"  # under half of it at either end: left alone
    assert redact(short, [CUT_SECRET]) == short


def test_findings_name_a_cut_piece_by_its_end():
    """The scanner reports a prefix or a suffix of a known secret, never the characters themselves."""
    text = f"head {CUT_SECRET[:25]} middle {CUT_SECRET[-30:]}"
    assert find_secrets(text, [CUT_SECRET]) == ["a prefix of a secret value passed by the caller at offset 5"]
    # The offset is where the suffix's last 20 characters (its counted piece) begin.
    assert find_secrets(CUT_SECRET[-30:], [CUT_SECRET]) == [
        "a suffix of a secret value passed by the caller at offset 10"
    ]
    assert find_secrets(CUT_SECRET[:19], [CUT_SECRET]) == []


def test_a_cut_never_splits_a_secret():
    """cut_point moves a cut that would halve a secret value or a secret shape to just before it."""
    redactor = Redactor([CUT_SECRET])
    text = "x" * 90 + CUT_SECRET + "y" * 50
    assert redactor.cut_point(text, 100) == 90
    assert redactor.cut_point(text, 80) == 80
    assert redactor.cut_point(text, 500) == len(text)
    shaped = "z" * 94 + " " + E2B_KEY + " rest"
    assert redactor.cut_point(shaped, 100) == 95


@settings(max_examples=200, deadline=None)
@given(prefix=texts, suffix=texts, secret=secret_values, cut=st.integers(min_value=0, max_value=440))
def test_redacting_before_a_cut_leaves_no_piece(prefix, suffix, secret, cut):
    """Redacted first, then cut anywhere: no piece of the secret the scanner knows is left."""
    out = redact(prefix + secret + suffix, [secret])[:cut]
    assert find_secrets(out, [secret]) == []


def test_environment_secrets_are_read_while_another_thread_changes_the_environment(monkeypatch):
    """pytest sets and drops PYTEST_CURRENT_TEST in its thread while lanes redact in theirs: reading the
    environment's secrets then never fails (a copy that met a removed key raised KeyError), and finds them."""
    import os
    import threading

    monkeypatch.setenv("SERVICE_API_KEY", "k" * 40)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for n in range(20):
                os.environ[f"PYTEST_E2B_ENV_CHURN_{n}"] = "x"
            for n in range(20):
                os.environ.pop(f"PYTEST_E2B_ENV_CHURN_{n}", None)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for _ in range(3000):
            assert "k" * 40 in env_secrets()
    finally:
        stop.set()
        thread.join(10)
