"""Redaction of secret values and secret-shaped strings, and the matching scanner.

One pass is used for everything the bundle holds (JSON, JUnit, HTML, logs): known secret
values (from the environment and from the caller) first, then patterns for credentials
that look like one (E2B keys, Hugging Face and OpenAI-style tokens, AWS keys, private key
blocks, bearer tokens, ``password=...`` pairs, credentials in URLs).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MARKER = "[REDACTED]"
# Used when replacing values keeps producing new matches (a secret overlapping the marker).
WITHHELD = "[REDACTED: content withheld]"

# Environment variable names whose values are secrets.
_SECRET_NAME = re.compile(
    r"(?i)(^E2B_API_KEY$|^E2B_ACCESS_TOKEN$|_KEY$|_TOKEN$|_SECRET$|^SECRET_|PASSWORD|PASSWD|_CREDENTIALS?$|_PAT$)"
)
# Env values shorter than this are too common to be secrets worth scanning for (e.g. "1").
MIN_ENV_SECRET = 8
MIN_SECRET = 4

_VALUE = r"[^\s\"',;&<>)}\]]"

# (name, pattern, group to replace or 0 for the whole match)
PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    (
        "private key block",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"
        ),
        0,
    ),
    ("e2b key", re.compile(r"\be2b_[A-Za-z0-9]{20,}"), 0),
    ("hugging face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), 0),
    ("sk- key", re.compile(r"\bsk-(?:[A-Za-z0-9]+-)?[A-Za-z0-9_-]{20,}"), 0),
    ("github token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}"), 0),
    ("aws access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"), 0),
    # Real bearer tokens are long and contain a digit; this keeps prose such as
    # "bearer authentication" from being reported.
    ("bearer token", re.compile(r"(?i)\bbearer\s+((?=[A-Za-z0-9._~+/-]*\d)[A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("url credentials", re.compile(r"(?<=://)([^/\s:@\"'<>]+:[^/\s@\"'<>]+)@"), 1),
    (
        "credential assignment",
        re.compile(
            r"(?i)\b(?:authorization|x-api-key|x-access-token|api[_-]?key|access[_-]?token|auth[_-]?token"
            r"|secret[_-]?key|client[_-]?secret|aws_secret_access_key|password|passwd)"
            r"[\"']?\s*[:=]\s*[\"']?(?!\[REDACTED|bearer\b|basic\b|none\b|null\b)"
            rf"(?:basic\s+)?({_VALUE}{{4,}})"
        ),
        1,
    ),
)


# A pattern can only match text containing one of its lowercase triggers; checking them first
# keeps redaction of ordinary log text fast (one substring test instead of a regex scan).
TRIGGERS: dict[str, tuple[str, ...]] = {
    "private key block": ("-----begin",),
    "e2b key": ("e2b_",),
    "hugging face token": ("hf_",),
    "sk- key": ("sk-",),
    "github token": ("gh", "github_pat_"),
    "aws access key id": ("akia", "asia"),
    "slack token": ("xox",),
    "jwt": ("eyj",),
    "bearer token": ("bearer",),
    "url credentials": ("://",),
    "credential assignment": ("auth", "api", "token", "secret", "passw"),
}


_ALL_TRIGGERS = tuple(dict.fromkeys(t for ts in TRIGGERS.values() for t in ts))


def _active(text: str) -> list[tuple[str, re.Pattern[str], int]]:
    low = text.lower()
    # Most strings (ids, timestamps, paths) hold no trigger at all; skip the per-pattern work.
    if not any(t in low for t in _ALL_TRIGGERS):
        return []
    return [entry for entry in PATTERNS if any(t in low for t in TRIGGERS[entry[0]])]


def env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names mark them as secrets (``*_KEY``, ``*_TOKEN``...)."""
    return list(_named_env_secrets(environ).values())


def _named_env_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if _SECRET_NAME.search(k) and len(v.strip()) >= MIN_ENV_SECRET}


def usable_secrets(secrets: Iterable[str]) -> list[str]:
    """Secrets worth matching, longest first; drops short ones and ones the marker itself contains."""
    out = {
        s
        for s in secrets
        if isinstance(s, str) and len(s) >= MIN_SECRET and s not in MARKER and s not in WITHHELD
    }
    return sorted(out, key=lambda s: (-len(s), s))


# Mapping keys whose string values are credentials ("api_key", "X-API-Key", "auth_token"...);
# anchored at the end so "tokenizer" or "max_tokens" are left alone.
_SECRET_KEY = re.compile(
    r"(?i)(^|[_\-. ])(api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token|secret"
    r"|password|passwd|authorization|credentials?)$"
)


#: Short strings a :class:`Redactor` remembers redacted: records repeat the same keys, kinds and
#: ids, and every string of every record is redacted. Bounded in count and length.
MAX_REMEMBERED, REMEMBERED_CHARS = 4096, 80


class Redactor:
    """Redacts with a fixed set of secret values (the environment's plus ``secrets``), compiled once."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        named = _named_env_secrets(environ)
        extra = [s for s in secrets if isinstance(s, str)]
        self.values = usable_secrets([*named.values(), *extra])
        # Labels name where a value came from (an env var name, never the value) for findings.
        self._labels = {v: f"value of ${k}" for k, v in named.items()}
        for value in extra:
            self._labels.setdefault(value, "a secret value passed by the caller")
        self._alternation = re.compile("|".join(re.escape(s) for s in self.values)) if self.values else None
        self._seen: dict[str, str] = {}

    def _replace_values(self, text: str) -> str:
        pattern = self._alternation
        if pattern is None:
            return text
        # Replacing can create a new occurrence across the marker's edge; repeat a few times,
        # then withhold the text entirely rather than ever return a secret.
        for _ in range(8):
            if not pattern.search(text):
                return text
            text = pattern.sub(MARKER, text)
        return text if not pattern.search(text) else WITHHELD

    def text(self, text: str) -> str:
        """Return ``text`` with secret values and secret-shaped strings replaced by the marker."""
        if len(text) > REMEMBERED_CHARS:
            return self._text(text)
        done = self._seen.get(text)
        if done is None:
            done = self._text(text)
            if len(self._seen) < MAX_REMEMBERED:
                self._seen[text] = done
        return done

    def _text(self, text: str) -> str:
        text = self._replace_values(text)
        for _name, pattern, group in _active(text):
            text = pattern.sub(MARKER, text) if group == 0 else pattern.sub(_group_replacer(group), text)
        # A pattern replacement cannot reintroduce a value, but re-check to be certain.
        return self._replace_values(text)

    def data(self, value: Any) -> Any:
        """Redact every string (keys included) in JSON-like data; values under secret-named keys go."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = self.text(str(key))
                if _SECRET_KEY.search(name) and isinstance(item, str) and item not in ("", MARKER):
                    out[name] = MARKER
                else:
                    out[name] = self.data(item)
            return out
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and self._alternation is not None
            and self._alternation.search(repr(value))
        ):
            # A numeric secret (a PIN, an account number) inside a number: the number goes.
            return MARKER
        return value

    def find(self, text: str) -> list[str]:
        """Describe each secret value or secret-shaped string in ``text`` without repeating it.

        Findings name the kind, the source and the offset, never the secret, so they are safe to print.
        """
        findings: list[str] = []
        for secret in self.values:
            for form in encodings(secret):
                at = text.find(form)
                if at >= 0:
                    findings.append(f"{self._labels.get(secret, 'a secret value')} at offset {at}")
                    break
        for name, pattern, group in _active(text):
            for match in pattern.finditer(text):
                if group and match.group(group).startswith(MARKER):
                    continue
                findings.append(f"{name} at offset {match.start()}")
                break
        return findings


def _group_replacer(group: int) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        base = match.start()
        start, end = match.span(group)
        whole = match.group(0)
        return whole[: start - base] + MARKER + whole[end - base :]

    return replace


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` with every secret value and every secret-shaped string replaced by a marker.

    ``secrets`` adds to the values taken from the environment (``E2B_API_KEY``, ``*_KEY``,
    ``*_TOKEN``, ``*_SECRET``, passwords...). Values shorter than 4 characters are ignored.
    """
    return Redactor(secrets).text(text)


def redact_data(value: Any, secrets: Iterable[str] = ()) -> Any:
    """Redact every string (keys included) inside JSON-like data; values under secret-named keys go."""
    return Redactor(secrets).data(value)


def encodings(secret: str) -> set[str]:
    """The forms a secret takes in the bundle's files: raw, JSON-escaped, XML/HTML-escaped."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms |= {html.escape(secret), html.escape(secret, quote=False)}
    return {f for f in forms if f}


def find_secrets(text: str, secrets: Iterable[str] = ()) -> list[str]:
    """Describe each secret value or secret-shaped string in ``text`` without repeating it."""
    return Redactor(secrets).find(text)
