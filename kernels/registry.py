"""The operator catalogue: name -> OpDef.

The built-in operators are imported on first use; operators registered by users
(``opsim.register_operator``) sit beside them and never hide them. A name of the form
``path/to/file.py:name`` imports that file (once per process) and returns the operator it
registered under ``name`` (or for the kernel called ``name``), so a custom operator works
wherever an operator name does: ``opsim.run``, ``opsim run --kernel``, study files, worker
processes of a sweep.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback

from opsim.devices.names import did_you_mean
from opsim.kernels.common import OpDef

_OPS: dict[str, OpDef] = {}
_BUILTIN: set[str] = set()
_loaded = False
_FILES: dict[str, object] = {}          # absolute path -> module, of files loaded for their operators


def register(op: OpDef) -> OpDef:
    """Add (or replace) an operator. The built-in ones cannot be replaced by another one."""
    _load()
    if op.name in _BUILTIN and _OPS.get(op.name) is not op:
        raise ValueError(f"operator {op.name!r} is built in; register yours under another name")
    _OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    _load()
    op = _OPS.get(name)
    if op is None and _is_file_spec(name):
        op = _from_file(name)
    if op is None:
        raise KeyError(f"unknown operator {name!r}{did_you_mean(name, _OPS)}; known operators: "
                       f"{', '.join(sorted(_OPS))} (or path/to/file.py:name for a kernel registered with "
                       f"opsim.register_operator)")
    return op


def known(name: str) -> bool:
    """Whether ``get(name)`` finds an operator (a file spec is imported to find out)."""
    try:
        get(name)
    except (KeyError, ImportError, OSError, SyntaxError):
        return False
    return True


def names() -> list[str]:
    _load()
    return sorted(_OPS)


def _load() -> None:
    # Imported on first use: operator modules import the simulator, which plain catalogue
    # lookups (e.g. device listings) should not pay for. A flag, not "is _OPS empty": an
    # operator registered before the first lookup must not hide the built-in ones.
    global _loaded
    if _loaded:
        return
    _loaded = True
    from opsim.kernels import dsp
    from opsim.kernels.ascend import bce_backward, embedding_backward, flce_grad, mse_backward
    for mod in (mse_backward, bce_backward, embedding_backward, flce_grad, dsp):
        _BUILTIN.add(mod.OP.name)
        _OPS[mod.OP.name] = mod.OP


def _is_file_spec(name: str) -> bool:
    path, sep, attr = name.rpartition(":")
    return bool(sep and attr and path.endswith(".py"))


def load_file(path: str) -> object:
    """Import the Python file ``path`` once per process (it may register operators); the module."""
    full = os.path.abspath(path)
    module = _FILES.get(full)
    if module is None:
        if not os.path.isfile(full):
            raise KeyError(f"no such file {path!r}")
        modname = "opsim_user_" + hashlib.sha1(full.encode()).hexdigest()[:12]
        loader = importlib.util.spec_from_file_location(modname, full)
        if loader is None or loader.loader is None:    # not a .py file: no loader for it
            raise ImportError(f"{path!r} is not a Python file opsim can import")
        module = importlib.util.module_from_spec(loader)
        sys.modules[modname] = module
        # the file's own directory first on the path while it loads, as `python file.py` has it,
        # so a kernel file can import the helper modules beside it (its tiling, its golden)
        here = os.path.dirname(full)
        added = here not in sys.path
        if added:
            sys.path.insert(0, here)
        try:
            loader.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(modname, None)
            # the file's own error, one line where the user looks for it (its traceback stays
            # on __cause__ for a debugger)
            raise KeyError(f"{path}:{_failing_line(exc, full)}: cannot import it: {type(exc).__name__}: "
                           f"{exc.msg if isinstance(exc, SyntaxError) else exc}") from exc
        except BaseException:
            sys.modules.pop(modname, None)
            raise
        finally:
            if added and here in sys.path:
                sys.path.remove(here)
        _FILES[full] = module
    return module


def _failing_line(exc: Exception, full: str) -> int | str:
    """The line of ``full`` (an absolute path) where ``exc`` arose: a SyntaxError's own, else
    the innermost frame of that file in its traceback ("?" when none is)."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return exc.lineno
    line: int | str = "?"
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == full:
            line = lineno
    return line


def _from_file(spec: str) -> OpDef | None:
    """The operator ``file.py:name`` registered (importing the file on first use)."""
    path, _, attr = spec.rpartition(":")
    module = load_file(path)
    obj = getattr(module, attr, None)
    op_name = getattr(obj, "__opsim_operator__", None) or attr
    op = _OPS.get(op_name)
    if op is None:
        mine = sorted(n for n in _OPS if n not in _BUILTIN)
        raise KeyError(f"{path} registers no operator {attr!r} (register the kernel with "
                       f"opsim.register_operator; registered so far: {', '.join(mine) or 'none'})")
    return op
