"""Redaction of secret values and secret-shaped strings, and the matching scanner.

One pass is used for everything the bundle holds (JSON, JUnit, HTML, logs) and everything the
plugin hands pytest (failure messages, skip reasons, warnings, captured output): known secret
values (from the environment and from the caller) first, with any long piece of one that a cut
left at a text's edge, then patterns for credentials that look like one (E2B keys, Hugging Face
and OpenAI-style tokens, AWS keys, private key blocks, bearer tokens, ``password=...`` pairs,
credentials in URLs). Text is redacted before it is cut (:meth:`Redactor.cut_point` for cuts
that must keep the secret for a verdict), so a cut never leaves an unrecognisable half.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_e2b_env.environ import snapshot

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
#: A piece of a known secret this long (and at least half of it) is treated as the secret: a cut
#: leaves a prefix or a suffix, and 12 characters of a secret do not occur in ordinary text.
MIN_PIECE = 12
_ENDS = ("prefix", "suffix")

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
    env = snapshot() if environ is None else environ
    return {k: v for k, v in env.items() if _SECRET_NAME.search(k) and len(v.strip()) >= MIN_ENV_SECRET}


def piece_length(secret: str) -> int:
    """The shortest prefix or suffix of ``secret`` counted as a piece of it: 12 characters or half."""
    return max(MIN_PIECE, (len(secret) + 1) // 2)


def pieces(secret: str) -> tuple[str, str] | None:
    """The prefix and suffix of ``secret`` that mark a cut piece of it (None when it is too short)."""
    size = piece_length(secret)
    return (secret[:size], secret[-size:]) if len(secret) > size else None


def _ends(secret: str) -> list[tuple[str, str]]:
    """``(piece, "prefix" or "suffix")`` of ``secret``; none that the withheld marker contains."""
    ends = pieces(secret)
    if ends is None:
        return []
    return [(piece, kind) for piece, kind in zip(ends, _ENDS, strict=True) if piece not in WITHHELD]


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
        # Each secret's prefix and suffix pieces, for a secret long enough to have them.
        self._pieces_of = {secret: _ends(secret) for secret in self.values}
        # What a text holding a secret, or a piece of one, must contain: a secret's pieces (the
        # whole value contains them too), else the value. Substring tests are far quicker than
        # a regular expression over all of the text, and most text holds no secret at all.
        self._needles = tuple(
            dict.fromkeys(
                needle
                for secret, cut in self._pieces_of.items()
                for needle in ([piece for piece, _ in cut] or [secret])
            )
        )
        self._longest = max((len(s) for s in self.values), default=0)
        self._seen: dict[str, str] = {}

    def _has_value(self, text: str) -> bool:
        return any(needle in text for needle in self._needles)

    def _replace_values(self, text: str) -> str:
        if self._alternation is None:
            return text
        # Replacing can create a new occurrence across the marker's edge; repeat a few times,
        # then withhold the text entirely rather than ever return a secret.
        for _ in range(8):
            if not self._has_value(text):
                return text
            text = self._replace_pieces(self._alternation.sub(MARKER, text))
        return text if not self._has_value(text) else WITHHELD

    def _replace_pieces(self, text: str) -> str:
        """Replace what a cut left of a secret: its prefix or suffix, as long as it runs."""
        spans = []
        for secret, piece, kind in ((s, p, k) for s, cut in self._pieces_of.items() for p, k in cut):
            at = text.find(piece)
            while at >= 0:
                start, end = at, at + len(piece)
                if kind == "prefix":  # the rest of the secret may follow, up to where the cut fell
                    while end < len(text) and end - start < len(secret) and text[end] == secret[end - start]:
                        end += 1
                else:
                    left = len(secret) - len(piece)  # characters of the secret before the suffix
                    while start > 0 and left > 0 and text[start - 1] == secret[left - 1]:
                        start, left = start - 1, left - 1
                spans.append((start, end))
                at = text.find(piece, at + 1)
        if not spans:
            return text
        out, done = [], 0
        for start, end in sorted(spans):
            if end <= done:
                continue
            if start >= done:
                out += [text[done:start], MARKER]
            done = end
        return "".join(out) + text[done:]

    def cut_point(self, text: str, limit: int) -> int:
        """Where to cut ``text`` to at most ``limit`` characters without splitting a secret.

        ``limit``, or the start of a secret value or secret-shaped string running across it:
        that secret is left out whole rather than halved. For cuts of text that must stay
        unredacted (what a verdict reads); everything else is redacted first, then cut.
        """
        if len(text) <= limit:
            return len(text)
        # A secret across the cut starts before it; a window past the cut holds enough of it.
        window = text[: limit + self._longest + 1024]
        spans = [m.span() for m in self._alternation.finditer(window)] if self._alternation else []
        for _name, pattern, _group in _active(window):
            spans += [m.span() for m in pattern.finditer(window)]
        end = limit
        moved = True
        while moved:  # moving the cut back may land it inside an earlier, overlapping match
            moved = False
            for start, stop in spans:
                if start < end < stop:
                    end, moved = start, True
        return end

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
        if isinstance(value, list | tuple | set | frozenset):
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
            label = self._labels.get(secret, "a secret value")
            at = _first(text, encodings(secret))
            if at is not None:
                findings.append(f"{label} at offset {at}")
                continue
            # A secret cut in two: its long prefix or suffix is still that secret.
            for piece, kind in self._pieces_of[secret]:
                at = _first(text, encodings(piece))
                if at is not None:
                    findings.append(f"a {kind} of {label} at offset {at}")
                    break
        for name, pattern, group in _active(text):
            for match in pattern.finditer(text):
                if group and match.group(group).startswith(MARKER):
                    continue
                findings.append(f"{name} at offset {match.start()}")
                break
        return findings


def _first(text: str, forms: Iterable[str]) -> int | None:
    """The offset of the first of ``forms`` found in ``text`` (None when none is)."""
    found = [at for at in (text.find(form) for form in forms) if at >= 0]
    return min(found) if found else None


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
