"""IPython's input transformations, on the standard library: what a cell's source becomes before it runs.

E2B's code interpreter runs cells in an IPython kernel (IPython 9), which rewrites a cell before
Python parses it. ``transform_cell`` does what IPython 9's ``TransformerManager.transform_cell``
(``IPython/core/inputtransformer2.py``) does, except for stripping pasted prompts:

* leading blank lines are dropped and the common indentation is removed (``leading_indent``), so
  an indented script (open-r1's evaluation template) runs;
* ``%%name args`` on the first line makes the whole cell ``run_cell_magic('name', 'args', body)``;
* ``x = %magic args`` and ``x = !command`` assign what the magic or the command gives;
* a line starting with ``%``, ``!``, ``!!``, ``?``, ``??``, ``,``, ``;`` or ``/`` (indentation
  allowed) becomes the matching call; ``name?`` at the end of a line asks for help.

``prefilter_line`` then does what IPython's prefilter does to a one-line cell: automagic (``pip
install x`` or ``cd /tmp`` without ``%``, unless the name is a variable, a builtin or a keyword)
and the autocall of ``exit`` / ``quit``. Both are pure: the kernel passes in what it knows.
"""

from __future__ import annotations

import re
import sys
import tokenize
from collections.abc import Callable
from keyword import iskeyword
from textwrap import dedent

ESCAPE_SINGLES = {"!", "?", "%", ",", ";", "/"}
ESCAPE_DOUBLES = {"!!", "??"}
TRANSFORM_LOOP_LIMIT = 500  # IPython's bound on one cell's token transformations
_HELP_END = re.compile(
    r"""(%{0,2}
    (?!\d)[\w*]+            # Variable name
    (\.(?!\d)[\w*]+|\[-?[0-9]+\])*       # .etc.etc or [0], we only support literal integers.
    )
    (\?\??)$                # ? or ??
    """,
    re.VERBOSE,
)
_LINE_SPLIT = re.compile(r"^(\s*)([,;/%]|!!?|\?\??)?\s*(%{0,2}[\w\.\*]*)(.*?$|$)")
_TOKEN_ERRORS = (  # tokenizer errors IPython treats as a line it can still transform
    "unterminated string literal",
    "invalid non-printable character",
    "after line continuation character",
    "invalid decimal literal",
    "invalid binary literal",
    "invalid octal literal",
    "invalid hexadecimal literal",
    "in binary literal",
    "in octal literal",
    "expected EOF",
)


def transform_cell(cell: str) -> str:
    """The cell as IPython runs it (static transformations; see the module docstring)."""
    if not cell.endswith("\n"):
        cell += "\n"
    lines = cell.splitlines(keepends=True)
    lines = _cell_magic(_leading_indent(_leading_empty_lines(lines)))
    for _ in range(TRANSFORM_LOOP_LIMIT):
        changed, lines = _one_token_transform(lines)
        if not changed:
            return "".join(lines)
    raise RuntimeError(
        f"Input transformation still changing after {TRANSFORM_LOOP_LIMIT} iterations. Aborting."
    )


def _leading_empty_lines(lines: list[str]) -> list[str]:
    for i, line in enumerate(lines):
        if line and not line.isspace():
            return lines[i:]
    return lines


def _leading_indent(lines: list[str]) -> list[str]:
    return dedent("".join(lines)).splitlines(keepends=True) if lines else lines


def _cell_magic(lines: list[str]) -> list[str]:
    if not lines or not lines[0].startswith("%%") or re.match(r"%%\w+\?", lines[0]):
        return lines
    name, _, first_line = lines[0][2:].rstrip().partition(" ")
    body = "".join(lines[1:])
    return [f"get_ipython().run_cell_magic({name!r}, {first_line!r}, {body!r})\n"]


# ------------------------------------------------------------------ token transformations
def _tokens(lines: list[str]) -> list[list[tokenize.TokenInfo]]:
    """Tokens grouped by logical line (a bracketed expression is one line), as IPython groups them."""
    by_line: list[list[tokenize.TokenInfo]] = [[]]
    level = 0
    last: tokenize.TokenInfo | None = None
    try:
        try:
            for token in tokenize.generate_tokens(iter(lines).__next__):
                last = token
                by_line[-1].append(token)
                if token.type == tokenize.NEWLINE or (token.type == tokenize.NL and level <= 0):
                    by_line.append([])
                elif token.string in {"(", "[", "{"}:
                    level += 1
                elif token.string in {")", "]", "}"} and level > 0:
                    level -= 1
        except tokenize.TokenError as exc:  # IPython's generate_tokens_catch_errors
            if not any(error in str(exc.args[0]) for error in _TOKEN_ERRORS):
                raise
            start = (last.start[0], last.end[0]) if last else (1, 0)
            by_line[-1].append(
                tokenize.TokenInfo(tokenize.ERRORTOKEN, "", start, start, last.line if last else "")
            )
    except tokenize.TokenError:  # the cell ends inside a string or a bracket: fine here
        pass
    if not by_line[-1]:
        by_line.pop()
    return by_line


def _assign_op(line: list[tokenize.TokenInfo]) -> int | None:
    level = 0
    for i, token in enumerate(line):
        if token.string == "=" and level == 0:
            return i
        if token.string in {"(", "[", "{"}:
            level += 1
        elif token.string in {")", "]", "}"} and level > 0:
            level -= 1
    return None


def _end_of_continued_line(lines: list[str], start: int) -> int:
    end = start
    while lines[end].endswith("\\\n"):
        end += 1
        if end >= len(lines):
            break
    return end


def _continued_line(lines: list[str], start: tuple[int, int], end_line: int) -> str:
    parts = [lines[start[0]][start[1] :], *lines[start[0] + 1 : end_line + 1]]
    return " ".join([p.rstrip()[:-1] for p in parts[:-1]] + [parts[-1].rstrip()])


def _help_call(target: str, escape: str) -> str:
    method = "pinfo2" if escape == "??" else "psearch" if "*" in target else "pinfo"
    name, _, arg = f"{method} {target}".partition(" ")
    return f"get_ipython().run_line_magic({name.lstrip('%')!r}, {arg!r})"


def _escaped_call(escape: str, content: str) -> str:
    if escape == "!":
        return f"get_ipython().system({content!r})"
    if escape == "!!":
        return f"get_ipython().getoutput({content!r})"
    if escape in ("?", "??"):
        return _help_call(content, escape) if content else "get_ipython().show_usage()"
    name, _, args = content.partition(" ")
    if escape == "%":
        return f"get_ipython().run_line_magic({name!r}, {args!r})"
    if escape == ",":
        return '{}("{}")'.format(name, '", "'.join(args.split()))
    if escape == ";":
        return f'{name}("{args}")'
    if name == "":
        raise SyntaxError('"!" must be followed by a callable name')
    return "{}({})".format(name, ", ".join(args.split()))


class _Found:
    """One piece of special syntax: where it starts (0-based line, column) and how to rewrite it."""

    def __init__(
        self, start: tuple[int, int], priority: int, rewrite: Callable[[list[str]], list[str]]
    ) -> None:
        self.line, self.col = start[0] - 1, start[1]
        self.priority = priority
        self.rewrite = rewrite

    def order(self) -> tuple[int, int, int]:
        return self.line, self.col, self.priority


def _replace(lines: list[str], at: _Found, make: Callable[[str, str], str]) -> list[str]:
    """Replace the (continued) line at ``at`` by ``lhs + make(rhs)``, as IPython's transformers do."""
    lhs = lines[at.line][: at.col]
    end = _end_of_continued_line(lines, at.line)
    rhs = _continued_line(lines, (at.line, at.col), end)
    return [*lines[: at.line], lhs + make(lhs, rhs) + "\n", *lines[end + 1 :]]


def _find_magic_assign(by_line: list[list[tokenize.TokenInfo]]) -> _Found | None:
    for line in by_line:
        i = _assign_op(line)
        if (
            i is not None
            and len(line) >= i + 2
            and line[i + 1].string == "%"
            and line[i + 2].type == tokenize.NAME
        ):
            return _bound(line[i + 1].start, 10, lambda _lhs, rhs: _magic_call(rhs))
    return None


def _magic_call(rhs: str) -> str:
    name, _, args = rhs[1:].partition(" ")
    return f"get_ipython().run_line_magic({name!r}, {args!r})"


def _find_system_assign(by_line: list[list[tokenize.TokenInfo]]) -> _Found | None:
    for line in by_line:
        i = _assign_op(line)
        if i is None or line[i].line.strip().startswith("=") or len(line) < i + 2:
            continue
        start = None
        if sys.version_info >= (3, 12):
            if line[i + 1].type == tokenize.OP and line[i + 1].string == "!":
                start = line[i + 1].start
        else:
            j = i + 1
            while j < len(line) and line[j].type == tokenize.ERRORTOKEN:
                if line[j].string == "!":
                    start = line[j].start
                    break
                if not line[j].string.isspace():
                    break
                j += 1
        if start is not None:
            return _bound(start, 10, lambda _lhs, rhs: f"get_ipython().getoutput({rhs[1:]!r})")
    return None


def _find_escaped(by_line: list[list[tokenize.TokenInfo]]) -> _Found | None:
    for line in by_line:
        i = 0
        while i < len(line) and line[i].type in {tokenize.INDENT, tokenize.DEDENT}:
            i += 1
        if i < len(line) and line[i].string in ESCAPE_SINGLES:

            def make(_lhs: str, text: str) -> str:
                escape = text[:2] if len(text) > 1 and text[:2] in ESCAPE_DOUBLES else text[:1]
                return _escaped_call(escape, text[len(escape) :])

            return _bound(line[i].start, 10, make)
    return None


def _find_help_end(by_line: list[list[tokenize.TokenInfo]]) -> _Found | None:
    for line in by_line:
        if len(line) > 2 and line[-2].string == "?":
            i = 0
            while line[i].type in {tokenize.INDENT, tokenize.DEDENT}:
                i += 1
            start, q_line = line[i].start, line[-2].start[0] - 1

            def rewrite(lines: list[str], start: tuple[int, int] = start, q_line: int = q_line) -> list[str]:
                first = start[0] - 1
                piece = "".join(lines[first : q_line + 1])
                indent, content = piece[: start[1]], piece[start[1] :]
                match = _HELP_END.search(content)
                if not match:
                    raise SyntaxError(content)
                return [
                    *lines[:first],
                    indent + _help_call(match.group(1), match.group(3)) + "\n",
                    *lines[q_line + 1 :],
                ]

            return _Found(start, 5, rewrite)
    return None


def _bound(start: tuple[int, int], priority: int, make: Callable[[str, str], str]) -> _Found:
    holder: list[_Found] = []
    found = _Found(start, priority, lambda lines: _replace(lines, holder[0], make))
    holder.append(found)
    return found


def _one_token_transform(lines: list[str]) -> tuple[bool, list[str]]:
    by_line = _tokens(lines)
    finders = (_find_magic_assign, _find_system_assign, _find_escaped, _find_help_end)
    candidates = [found for finder in finders if (found := finder(by_line)) is not None]
    for found in sorted(candidates, key=_Found.order):
        try:
            return True, found.rewrite(lines)
        except SyntaxError:
            pass
    return False, lines


# ------------------------------------------------------------------ one-line prefilter
def prefilter_line(
    cell: str,
    is_magic: Callable[[str], bool],
    is_shadowed: Callable[[str], bool],
    is_autocall: Callable[[str], bool],
) -> str:
    """IPython's dynamic step for a one-line (transformed) cell: automagic and ``exit`` autocall.

    ``is_magic(name)``: a line magic of that name exists; ``is_shadowed(name)``: the user's
    namespace or the builtins have it, or it is a keyword; ``is_autocall(name)``: the user's
    object of that name is called without parentheses (IPython's ``exit`` and ``quit``).
    """
    if len(cell.splitlines()) != 1:
        return cell
    line = cell.rstrip("\n").split("\n")[0]
    if not line.strip():
        return line + "\n"
    pre, escape, ifun, raw_rest = _split(line)
    rest = raw_rest.lstrip()
    if escape:
        return line + "\n"
    if is_autocall(ifun):
        if rest.startswith("("):
            return line + "\n"
        call = f"{ifun.rstrip()}({rest[:-1]});" if rest.endswith(";") else f"{ifun.rstrip()}({rest})"
        return call + "\n"
    if rest and rest[0] in "=,":
        return line + "\n"
    if is_magic(ifun) and not is_shadowed(ifun.split(".", 1)[0]) and not iskeyword(ifun.split(".", 1)[0]):
        name, _, args = (ifun + " " + rest).partition(" ")
        whitespace = "" if pre.strip() else pre
        return f"{whitespace}get_ipython().run_line_magic({name.lstrip('%')!r}, {args!r})\n"
    return line + "\n"


def _split(line: str) -> tuple[str, str, str, str]:
    match = _LINE_SPLIT.match(line)
    if match is None:  # IPython's fallback (its pattern matches any one line)
        parts = line.split(None, 1)
        pre = line[: len(line) - len(line.lstrip())]
        return pre, "", parts[0] if parts else line, parts[1] if len(parts) > 1 else ""
    pre, escape, ifun, rest = match.groups()
    return pre, escape or "", ifun.strip(), rest
