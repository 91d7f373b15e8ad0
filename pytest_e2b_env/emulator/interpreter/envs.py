"""Environment variables of a cell, set the way E2B's code-interpreter server sets them: in the code.

E2B's server (``template/server/messaging.py``) does not hand ``run_code(envs=)`` to the kernel's
environment; it writes one line of Python per variable,
``import os; os.environ['KEY'] = 'VALUE'``, in front of the cell (indented like the cell's first
line), and after the cell runs a silent cell that deletes each one, or sets it back to the
sandbox's value. The first cell of every context also gets such a line for each of envd's
variables (``GET /envs``: ``E2B_SANDBOX``, ``E2B_SANDBOX_ID``, ``E2B_TEMPLATE_ID`` and the
sandbox's own ``envs``, in key order), once, whether that cell runs or not. Consequences a harness
meets on E2B and here alike: the lines count in tracebacks (``Cell In[1], line 6`` for the first
line of a first cell), ``os`` is imported into the cell's namespace, and a value holding ``'``,
``\\`` or a newline is pasted into a string literal as it is (a quote is a SyntaxError that runs
none of the cell; ``\\n`` in JSON text becomes a newline).
"""

from __future__ import annotations

from pytest_e2b_env.settings import ENV_IN_SANDBOX, ENV_IN_SANDBOX_ID, ENV_IN_SANDBOX_TEMPLATE


def set_code(envs: dict[str, str]) -> str:
    """The lines that set ``envs`` (E2B's ``_set_env_vars_code`` for Python)."""
    return "\n".join(f"import os; os.environ['{key}'] = '{value}'" for key, value in envs.items())


def reset_code(envs: dict[str, str], sandbox_envs: dict[str, str] | None) -> str:
    """The silent cell after a cell with ``envs``: the sandbox's value back, or the variable gone."""
    lines = []
    for key in envs:
        if sandbox_envs and key in sandbox_envs:
            lines.append(f"import os; os.environ['{key}'] = '{sandbox_envs[key]}'")
        else:
            lines.append(f"import os; del os.environ['{key}']")
    return "\n".join(lines)


def indentation(code: str) -> str:
    """The leading whitespace of the first line that is not blank."""
    if not code or not code.strip():
        return ""
    for line in code.split("\n"):
        if line.strip():
            return line[: len(line) - len(line.lstrip())]
    return ""


def _indent(code: str, level: str) -> str:
    if not code or not level:
        return code
    return "\n".join(level + line if line.strip() else line for line in code.split("\n"))


def with_envs(code: str, sandbox_snippet: str, envs: dict[str, str]) -> str:
    """The code E2B sends to the kernel: the variables' lines, then the cell."""
    cell_snippet = set_code(envs) if envs else ""
    if not sandbox_snippet and not cell_snippet:
        return code
    snippet = _indent(sandbox_snippet + "\n" + cell_snippet, indentation(code))
    return snippet + "\n" + code


def sandbox_envs(sandbox_id: str, template_id: str, envs: dict[str, str]) -> dict[str, str]:
    """What envd's ``GET /envs`` answers for a sandbox, in the order E2B's server receives it."""
    found = {ENV_IN_SANDBOX: "true", ENV_IN_SANDBOX_ID: sandbox_id, ENV_IN_SANDBOX_TEMPLATE: template_id}
    found.update({k: v for k, v in envs.items() if k not in found})
    return dict(sorted(found.items()))
