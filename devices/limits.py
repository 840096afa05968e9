"""Plausibility limits of device files: what the simulator can run, checked when a spec is built.

The schema (:mod:`devices.spec`) checks types and signs; this module checks that the values
describe a machine the simulator can build and run on a host: rates and sizes it divides by are
positive, and counts and sizes are bounded so that a typo (``aiv = 1000000``) is refused in
milliseconds instead of exhausting host memory minutes later.

The bounds are generous defaults, far above any product in the catalogue, and every one can be
raised for a deliberate experiment through an environment variable ``OPSIM_LIMIT_<NAME>``
(e.g. ``OPSIM_LIMIT_MAX_CORES=4096``):

=====================  ===============  ==================================================
name                   default          bounds
=====================  ===============  ==================================================
MAX_CORES              1024             cores.aic + cores.aiv + cores.dsp
MAX_LOCAL_BYTES        1 GiB            one per-core buffer (ub, l1, l0a/b/c, private)
MAX_GM_BYTES           2**50 (1 PiB)    gm.capacity, gm.window, smc, l2.size
MAX_CLOCK_HZ           1e11             clock_hz
MAX_QUEUE_DEPTH        65536            scalar.queue_depth
MAX_FILE_BYTES         4 MiB            size of a device or study TOML file
MAX_TOML_DEPTH         32               nesting of tables/arrays in a TOML file
=====================  ===============  ==================================================
"""
from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["DEFAULTS", "limit", "check_spec", "toml_depth"]

DEFAULTS: dict[str, int] = {
    "MAX_CORES": 1024,
    "MAX_LOCAL_BYTES": 1 << 30,
    "MAX_GM_BYTES": 1 << 50,
    "MAX_CLOCK_HZ": 100_000_000_000,
    "MAX_QUEUE_DEPTH": 65536,
    "MAX_FILE_BYTES": 4 << 20,
    "MAX_TOML_DEPTH": 32,
}


def limit(name: str) -> int:
    """The bound ``name`` (see the table above), from ``OPSIM_LIMIT_<NAME>`` when set."""
    default = DEFAULTS[name]
    text = os.environ.get(f"OPSIM_LIMIT_{name}")
    if text is None or not text.strip():
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise ValueError(f"environment variable OPSIM_LIMIT_{name}={text!r} must be an integer "
                         f"(default {default})") from None
    if value <= 0:
        raise ValueError(f"environment variable OPSIM_LIMIT_{name}={text!r} must be > 0")
    return value


def toml_depth(node: Any, _depth: int = 0) -> int:
    """Nesting depth of a parsed TOML document, iteratively (a deep document cannot recurse)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(node, _depth)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def check_spec(spec: Any, fail: Callable[[str], Exception]) -> None:
    """Raise ``fail(message)`` naming the first implausible field of ``spec`` (a DeviceSpec)."""

    def need(ok: bool, key: str, value: Any, allowed: str) -> None:
        if not ok:
            raise fail(f"field '{key}' = {value!r} is not plausible: {allowed}")

    def positive(key: str, value: Any) -> None:
        need(value > 0, key, value, "must be > 0 (the simulator divides by it)")

    def at_most(key: str, value: Any, name: str) -> None:
        bound = limit(name)
        need(value <= bound, key, value, f"must be <= {bound} (limit {name}; raise it with "
                                         f"the environment variable OPSIM_LIMIT_{name})")

    c = spec.cores
    at_most("cores (aic + aiv + dsp)", c.aic + c.aiv + c.dsp, "MAX_CORES")
    at_most("clock_hz", spec.clock_hz, "MAX_CLOCK_HZ")
    for name in ("ub", "l1", "l0a", "l0b", "l0c"):
        buf = getattr(spec, name)
        if buf is not None:
            positive(f"{name}.size", buf.size)
            at_most(f"{name}.size", buf.size, "MAX_LOCAL_BYTES")
            positive(f"{name}.alignment", buf.alignment)
    gm = spec.gm
    positive("gm.capacity", gm.capacity)
    positive("gm.alignment", gm.alignment)
    at_most("gm.capacity", gm.capacity, "MAX_GM_BYTES")
    at_most("gm.window", gm.window, "MAX_GM_BYTES")
    need(gm.window >= gm.capacity, "gm.window", gm.window, f"must be >= gm.capacity ({gm.capacity})")
    if spec.l2 is not None:
        l2 = spec.l2
        for f in ("size", "chunk", "read_rate", "write_rate", "bandwidth"):
            positive(f"l2.{f}", getattr(l2, f))
        at_most("l2.size", l2.size, "MAX_GM_BYTES")
        need(l2.chunk <= l2.size, "l2.chunk", l2.chunk, f"must be <= l2.size ({l2.size})")
    for name in ("mte2", "mte3", "mte1", "fixp", "dma"):
        m = getattr(spec, name)
        if m is not None:
            positive(f"{name}.base", m.base)
    for name, is_local in (("private", True), ("smc", False)):
        w = getattr(spec, name)
        if w is not None:
            positive(f"{name}.capacity", w.capacity)
            positive(f"{name}.alignment", w.alignment)
            at_most(f"{name}.capacity", w.capacity, "MAX_LOCAL_BYTES" if is_local else "MAX_GM_BYTES")
            need(w.window >= w.capacity, f"{name}.window", w.window,
                 f"must be >= {name}.capacity ({w.capacity})")
    positive("vector.repeat_bytes", spec.vector.repeat_bytes)
    positive("vector.max_repeat", spec.vector.max_repeat)
    positive("scalar.queue_depth", spec.scalar.queue_depth)
    at_most("scalar.queue_depth", spec.scalar.queue_depth, "MAX_QUEUE_DEPTH")
    if spec.cube is not None:
        for f in ("m", "k", "n"):
            positive(f"cube.{f}", getattr(spec.cube, f))
    for op, table in spec.kernels.items():
        for key, value in table.items():
            if key.endswith(("_budget", "_bytes", "_size")):
                need(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                     f"kernels.{op}.{key}", value, "must be a number > 0")
                at_most(f"kernels.{op}.{key}", value, "MAX_LOCAL_BYTES")
