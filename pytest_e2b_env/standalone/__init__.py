"""Code that runs inside sandboxes, or on the standard library alone.

What belongs here: every module that runs where this package is not importable. The reward
runner and its isolation probe (uploaded into each reward worker and run by ``python3 -I -B -S``),
the code-interpreter kernel (sent to a sandbox's ``python3`` on stdin), the builder and init of
namespace sandboxes (run by the emulator under ``python -I -S``), and the modules those import:
the raw Linux syscalls (``linux``), the init's control frames (``frames``), the sandbox's
overlay layer (``upper_layer``) and the files operations confined to a sandbox root (``fsops``).

The rule: a module here imports only the standard library and other modules of this package,
never the rest of ``pytest_e2b_env`` and never a third-party package (``tests/meta`` checks it).
Modules of this package import each other with relative imports (``from . import linux as L``),
at the top of the module, so the same text works in both places it runs:

* on the host, as ordinary modules of the package (``from pytest_e2b_env.standalone import fsops``);
* as a script outside the package, through :func:`assemble.script`: it returns the module's
  text with the modules of this package it imports, and theirs, embedded ahead of its first
  statement. The embedded modules form a package of their own in the running script, so its
  relative imports resolve with nothing on ``sys.path`` (``-I`` leaves not even the script's
  directory there). Its relative imports are the whole list of what gets embedded: nothing to
  keep in step by hand, and each piece of syscall code lives in one file.

Scripts run as ``__main__`` guard their entry point (``if __name__ == "__main__":``), so that
importing them, on the host or in a check, runs nothing.
"""
