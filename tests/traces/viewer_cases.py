"""The runs whose exported traces the viewer-format tests open: every operator of the seed
documents (MSE, BCE, FLCE and the embedding backward on atlas-a2, the DSP BCE gradient on
mt7004) in full and timing mode, and one opsim.asc example kernel (TQue double-buffered add),
each at every recording trace level; plus an independent reading of the run's own profile
tables, the reference the trace is compared with."""
from __future__ import annotations

import collections
import functools
import importlib.util
import pathlib
import re

import numpy as np

import opsim
from opsim import devices
from opsim.kernels import registry

LEVELS = ("launch", "tile", "instruction")
OPERATORS = (("mse_loss_backward", "atlas-a2"), ("binary_cross_entropy_backward", "atlas-a2"),
             ("fused_linear_cross_entropy_loss_grad", "atlas-a2"),
             ("embedding_dense_backward", "atlas-a2"), ("binarycrossentropygrad", "mt7004"))
ASC_KERNEL = "asc:add_tque"
CASES = tuple((op, dev, mode) for op, dev in OPERATORS for mode in ("full", "timing")) + \
    ((ASC_KERNEL, "atlas-a2", "full"),)
# The vendor simulator's thread order inside a core (docs: README "Traces", traces/layout.py).
PIPE_ORDER = ("SCALAR", "MTE2", "MTE1", "CUBE", "FIXP", "VECTOR", "MTE3", "DMA", "FLOWCTRL")


def case_id(case: tuple[str, str, str]) -> str:
    return "-".join(case)


def _asc_module():
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kernels" / "add_tque.py"
    spec = importlib.util.spec_from_file_location("viewer_add_tque", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(op: str, device: str, mode: str, level: str):
    """A fresh run (not cached: the determinism tests run each case twice)."""
    if op == ASC_KERNEL:
        return _asc_module().run(8 * 2048, 8, 2, trace=level)
    spec = devices.load(device)
    kind = registry.get(op)
    kwargs = kind.example(np.random.default_rng(0), spec, kind.dtypes(spec)[-1])
    if mode == "timing":
        kwargs = {k: opsim.TensorSpec(v.shape, v.dtype) if isinstance(v, np.ndarray) else v
                  for k, v in kwargs.items()}
    return opsim.run(op, device=device, mode=mode, trace=level, **kwargs)


@functools.lru_cache(maxsize=None)
def cached_run(op: str, device: str, mode: str, level: str):
    return run(op, device, mode, level)


def profile_counts(res) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str, str], int]]:
    """From the run's instr_exe table: instructions per (core, pipe) and busy cycles per
    (core, pipe, instruction)."""
    head, rows = res.tables()["instr_exe"]
    col = {h: i for i, h in enumerate(head)}
    calls: dict[tuple[str, str], int] = collections.Counter()
    cycles: dict[tuple[str, str, str], int] = collections.Counter()
    for r in rows:
        calls[(r[col["core"]], r[col["pipe"]])] += int(r[col["call_count"]])
        cycles[(r[col["core"]], r[col["pipe"]], r[col["instr"]])] += int(r[col["cycles"]])
    return dict(calls), dict(cycles)


def process_rank(name: str) -> tuple:
    """The documented process order: host, cores by number (cube core before its vector cores),
    DSP cores, memory last."""
    if name == "host":
        return (0,)
    m = re.fullmatch(r"core(\d+)\.(cubecore|veccore)(\d+)", name)
    if m:
        return (1, int(m[1]), m[2] == "veccore", int(m[3]))
    m = re.fullmatch(r"dsp\.core(\d+)", name)
    if m:
        return (2, int(m[1]))
    return (9,) if name == "memory" else (5, name)


def thread_rank(name: str) -> tuple:
    """BLOCK, then the pipes in the vendor's order (sub-lanes ``PIPE#k`` after their pipe), then
    the host's stream rows."""
    base, _, lane = name.partition("#")
    if base == "BLOCK":
        return (0,)
    if base in PIPE_ORDER:
        return (1, PIPE_ORDER.index(base), int(lane or 0))
    return (2, name)
