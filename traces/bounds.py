"""The resource that caps a run, named with its number.

``classify_bound`` (traces/summary.py) picks the bound category from the busiest pipe; this
module says *what* limits that pipe, from the same device facts everywhere (the simulator's
statistics, the estimate and the trace summary):

- a copy pipe (MTE2, MTE3, DMA, FIXP) is capped by its per-core copy rate -- the calibrated
  ``base + shared/n`` bytes/cycle of each of ``n`` concurrent copies (``[mte2]``/``[mte3]``/``[dma]``
  of the device file), a cube core's GM->L1 rate (``rates.gm_read``), Fixpipe's rate -- unless the
  shared link behind it (HBM/DDR, L2) is the one that is full;
- a compute pipe (VECTOR, CUBE, SCALAR) or MTE1 is capped by itself;
- either way, a launch that used fewer cores than the device has says so, because more blocks
  would raise the aggregate rate.

A link counts as the cap when its achieved rate is at least ``SATURATED`` of its peak.
"""
from __future__ import annotations

from typing import Any, Mapping

# a shared link this full is the cap rather than the per-core rate of the copies on it
SATURATED = 0.85
COPY_PIPES = ("MTE2", "MTE3", "DMA", "FIXP")


def copy_rate_facts(spec: Any) -> dict[str, list[float]]:
    """Per-core copy rates of a device spec as ``{path: [base, shared]}`` bytes/cycle: each of
    ``n`` concurrent copies on a path moves at ``base + shared / n`` (shared 0: a flat rate)."""
    out: dict[str, list[float]] = {}
    for name, model in (("MTE2", spec.mte2), ("MTE3", spec.mte3), ("DMA", spec.dma)):
        if model is not None:
            out[name] = [float(model.base), float(model.shared)]
    rates = getattr(spec, "rates", None)
    if spec.mte2 is not None and rates is not None:
        # a cube core's GM->L1 load (simulator/cube.py cube_load_model): no pool share
        out["cube MTE2"] = [float(rates.gm_read or spec.mte2.base), 0.0]
        if rates.l2_read:
            out["L2 read"] = [float(rates.l2_read), 0.0]
    if getattr(spec, "fixp", None) is not None:
        out["FIXP"] = [float(spec.fixp.base), 0.0]
    return out


def core_kind(core: str) -> str:
    """"cube" for a cube core, "dsp" for a DSP core, else "vector" (coupled AI cores too)."""
    if "cubecore" in core:
        return "cube"
    return "dsp" if core.startswith("dsp") else "vector"


def cap_text(pipe: str, kind: str, cores_used: int, cores_total: int, facts: Mapping[str, Any],
             links: Mapping[str, tuple[float, float | None]], clock_hz: float) -> str:
    """What caps ``pipe`` on ``cores_used`` cores of ``kind`` (of ``cores_total``).

    ``facts`` are a trace's device facts (``Device.trace_facts``: ``gm_link``, ``copy_rates``);
    ``links`` maps a link name to (achieved GB/s, peak GB/s) over the run.
    """
    gm = str(facts.get("gm_link") or "GM")
    n = max(1, int(cores_used))
    more = cores_used < cores_total
    fewer = f"; only {cores_used} of {cores_total} {kind} cores used: more blocks would help" if more else ""

    def use(name: str) -> float | None:
        ach, peak = links.get(name, (0.0, None))
        return ach / peak if peak else None

    if pipe not in COPY_PIPES:
        u = use(gm)
        return f"{pipe} pipe is the cap" + (f" ({gm} {100 * u:.0f}% used)" if u is not None else "") + fewer
    for name in (gm, "L2"):
        u = use(name)
        if u is not None and u >= SATURATED:
            ach, peak = links[name]
            return f"{name} link full: {ach:.1f} of {peak:.1f} GB/s ({100 * u:.0f}%)"
    rates = facts.get("copy_rates") or {}
    key = "cube MTE2" if pipe == "MTE2" and kind == "cube" else pipe
    model = rates.get(key)
    u = use(gm)
    used = f"{gm} {100 * u:.0f}% used" if u is not None else f"{gm} use unknown"
    if not model:
        return f"{pipe} of {cores_used} {kind} cores; {used}" + (": more blocks would help" if more else "")
    base, shared = model
    per_core = base + shared / n
    total = per_core * n * clock_hz / 1e9
    peak = links.get(gm, (0.0, None))[1]
    # the cores' copy rates add up to more than the link carries (a narrow what-if HBM): name its
    # peak, not a sum above it that no link could have carried
    over = peak is not None and 0 < peak < total
    head = (f"{pipe} of {cores_used} {kind} core{'s' if cores_used != 1 else ''} at {per_core:.1f} "
            f"B/cycle each" + ("" if over else f" = {total:.0f} GB/s"))
    if key == "cube MTE2" and "L2 read" in rates:
        head += f" from {gm} ({rates['L2 read'][0]:.0f} B/cycle each from the L2)"
    if over:
        head += f", more than the {gm} link's {peak:.0f} GB/s peak"
    return f"{head}; {used}" + (": more blocks would help" if more else "")
