"""The operator catalogue: name -> OpDef. Operators register here as they land."""
from __future__ import annotations

from kernels.common import OpDef

_OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    _OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    _load()
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known operators: {', '.join(sorted(_OPS))}") from None


def names() -> list[str]:
    _load()
    return sorted(_OPS)


def _load() -> None:
    if _OPS:
        return
    from kernels.ascend import mse_backward
    register(mse_backward.OP)
    for mod in ("kernels.ascend.bce_backward", "kernels.ascend.embedding_backward",
                "kernels.ascend.flce_grad", "kernels.dsp"):
        _try_register(mod)


def _try_register(module: str) -> None:
    """Operators that are not in this tree yet are simply absent from the catalogue."""
    import importlib
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return
    for op in getattr(mod, "OPS", ()):
        register(op)
    if hasattr(mod, "OP"):
        register(mod.OP)
