"""Import side effects a case host has no use for, skipped: gradio regenerating its type stubs.

openenv imports gradio whatever the subject uses of it, and gradio's component metaclass
(``gradio.component_meta.create_or_modify_pyi``) re-reads and re-parses each component's source at
every import to rewrite the ``.pyi`` stub beside it in site-packages: about 1.5 to 2 s of CPU of the
5 s ``import openenv.core.env_server.http_server`` takes, paid by every case host template of an
episode subject. The stubs are for editors; nothing at run time reads them. A finder replaces that
one function with a no-op as ``gradio.component_meta`` is imported, before any component class is
made; anything else of gradio is untouched, and a gradio without the function is left as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any

MODULE = "gradio.component_meta"
FUNCTION = "create_or_modify_pyi"


def _no_stub(*_args: Any, **_kwargs: Any) -> None:
    """Stands in for gradio's stub writer in a case host: the stub is not written."""


class _SkipStubs(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # the module found as it would be without this finder
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            if callable(getattr(module, FUNCTION, None)):
                setattr(module, FUNCTION, _no_stub)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
        return spec


def install() -> None:
    """Skip the stub writing in this process from now on (idempotent; too late once gradio is imported)."""
    if not any(isinstance(f, _SkipStubs) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipStubs())
