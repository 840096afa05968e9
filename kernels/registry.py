"""The operator catalogue: name -> OpDef."""
from __future__ import annotations

from opsim.kernels.common import OpDef

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
    # Imported on first use: operator modules import the simulator, which plain catalogue
    # lookups (e.g. device listings) should not pay for.
    if _OPS:
        return
    from opsim.kernels import dsp
    from opsim.kernels.ascend import bce_backward, embedding_backward, flce_grad, mse_backward
    for mod in (mse_backward, bce_backward, embedding_backward, flce_grad, dsp):
        register(mod.OP)
