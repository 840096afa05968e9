"""Plain-text views of the device catalogue, with the provenance of every number.

``catalogue_table()`` prints one block per device (clock, cores, on-chip memories, GM, L2 ...).
With ``provenance=True`` every value carries a short tag -- ``[S1]`` for a source, ``[A2]`` for
an assumption, ``[O1]`` for a what-if override -- and the tagged texts are listed under the
block, followed by the docs/sources.md entries they cite and the documents behind them.
``provenance_rows()`` gives the same information for one spec as sortable tuples.
"""
from __future__ import annotations

import textwrap
from typing import Any, Iterable, Mapping

from .sources import describe, resolve
from .spec import DeviceSpec, Provenance, load

__all__ = ["catalogue_table", "provenance_rows"]

WIDTH = 100
_LABEL_W = 10
_VALUE_W = 62
_KIND_LETTER = {"source": "S", "assumption": "A", "override": "O"}


# ---------------------------------------------------------------------------------------------
# Value formatting
# ---------------------------------------------------------------------------------------------

def _size(n: int | float) -> str:
    """Bytes in the largest binary unit that divides them exactly (else decimal GB/MB)."""
    n = int(n)
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit:
            if n % unit == 0:
                return f"{n // unit} {name}"
            break
    if n >= 10**9:
        return f"{n / 1e9:g} GB"
    if n >= 10**6:
        return f"{n / 1e6:g} MB"
    return f"{n} B"


def _addr(a: int) -> str:
    return f"0x{a:08X}"


def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:g} GB/s"


def _num(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.10g}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_num(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return str(v)


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------

def _value_at(spec: DeviceSpec, key: str) -> Any:
    node: Any = spec.raw
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def provenance_rows(spec: DeviceSpec) -> list[tuple[str, str, str, str]]:
    """``(field, value, kind, text)`` for every number of ``spec`` that carries provenance.

    ``kind`` is ``"source"``, ``"assumption"`` or ``"override"``; rows are sorted by field.
    """
    rows = []
    for key, prov in spec.provenance.items():
        rows.append((key, _num(_value_at(spec, key)), prov.kind, prov.text))
    return sorted(rows)


def _prov_for(spec: DeviceSpec, key: str) -> Provenance | None:
    """Provenance of ``key`` or of the nearest enclosing table that carries one."""
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        p = spec.provenance.get(".".join(parts[:i]))
        if p is not None:
            return p
    return None


class _Notes:
    """Numbered provenance notes of one block; identical texts share one tag."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, str], str] = {}
        self.fields: dict[str, list[str]] = {}
        self.count: dict[str, int] = {}

    def tag(self, spec: DeviceSpec, keys: Iterable[str]) -> str:
        out = []
        for key in keys:
            prov = _prov_for(spec, key)
            if prov is None:
                continue
            ident = (prov.kind, prov.text)
            if ident not in self.tags:
                letter = _KIND_LETTER.get(prov.kind, "?")
                self.count[letter] = self.count.get(letter, 0) + 1
                self.tags[ident] = f"{letter}{self.count[letter]}"
                self.fields[self.tags[ident]] = []
            t = self.tags[ident]
            if key not in self.fields[t]:
                self.fields[t].append(key)
            if t not in out:
                out.append(t)
        return "[" + ",".join(out) + "]" if out else ""

    def lines(self) -> list[str]:
        out = []
        order = {"S": 0, "A": 1, "O": 2, "?": 3}
        for (kind, text), t in sorted(self.tags.items(),
                                      key=lambda kv: (order[kv[1][0]], int(kv[1][1:]))):
            head = f"[{t}]"
            body = f"{kind}: {text}  ({', '.join(self.fields[t])})"
            out.append(textwrap.fill(body, width=WIDTH, initial_indent=f"  {head:<6}",
                                     subsequent_indent=" " * 8, break_long_words=True,
                                     break_on_hyphens=False))
        return out

    def source_lines(self) -> list[str]:
        """The docs/sources.md entries the tagged texts cite, once each, with their documents."""
        seen: list = []
        for _kind, text in self.tags:
            for entry in resolve(text, documents=True):
                if entry not in seen:
                    seen.append(entry)
        return [textwrap.fill(describe(e), width=WIDTH, initial_indent="  ",
                              subsequent_indent=" " * 6, break_long_words=True,
                              break_on_hyphens=False) for e in seen]


# ---------------------------------------------------------------------------------------------
# Rows of one block
# ---------------------------------------------------------------------------------------------

def _rows(spec: DeviceSpec) -> list[tuple[str, str, list[str]]]:
    """``(label, value text, dotted keys whose provenance backs it)``."""
    rows: list[tuple[str, str, list[str]]] = []
    c = spec.cores
    rows.append(("clock", f"{spec.clock_hz / 1e6:g} MHz", ["clock_hz"]))
    if c.architecture == "split":
        rows.append(("cores", f"{c.aic} AIC + {c.aiv} AIV (split)", ["cores.aic", "cores.aiv"]))
    elif c.architecture == "coupled":
        rows.append(("cores", f"{c.aic} AI cores, coupled (cube + vector per core; aiv = {c.aiv})",
                     ["cores.aic", "cores.aiv"]))
    else:
        rows.append(("cores", f"{c.dsp} DSP cores (default core_mask {(1 << c.dsp) - 1:#x})", ["cores.dsp"]))

    if spec.ub is not None:
        rows.append(("UB", f"{_size(spec.ub.size)} per core ({spec.ub.size} B)", ["ub.size"]))
    if spec.l1 is not None:
        rows.append(("L1", _size(spec.l1.size), ["l1.size"]))
    l0 = [(n, getattr(spec, n)) for n in ("l0a", "l0b", "l0c") if getattr(spec, n) is not None]
    if l0:
        rows.append(("L0A/B/C", " / ".join(_size(b.size) for _, b in l0),
                     [f"{n}.size" for n, _ in l0]))
    if spec.private is not None:
        p = spec.private
        rows.append(("private", f"{_size(p.capacity)} per core at {_addr(p.base)} "
                                f"(window {_size(p.window)})",
                     ["private.capacity", "private.base", "private.window"]))
    if spec.smc is not None:
        s = spec.smc
        rows.append(("SMC", f"{_size(s.capacity)} shared at {_addr(s.base)}",
                     ["smc.capacity", "smc.base"]))
    g = spec.gm
    rows.append(("GM", f"{g.kind} {_size(g.capacity)}, {_gbps(g.bandwidth)} "
                       f"(at {_addr(g.base)})", ["gm.capacity", "gm.bandwidth", "gm.base"]))
    if spec.l2 is not None:
        l2 = spec.l2
        rows.append(("L2", f"{_size(l2.size)}, {_gbps(l2.bandwidth)}; per core {l2.read_rate:g} read, "
                           f"{l2.write_rate:g} write B/cycle",
                     ["l2.size", "l2.bandwidth", "l2.read_rate", "l2.write_rate"]))
    if spec.dma is not None:
        d = spec.dma
        rows.append(("DMA", f"{d.base:g} B/cycle per core ({_gbps(d.base * spec.clock_hz)}), "
                            f"start-up {d.startup} cycles", ["dma.base", "dma.startup"]))
    for pipe in ("mte2", "mte3"):
        m = getattr(spec, pipe)
        if m is not None:
            rows.append((pipe.upper(), f"{m.base:g} + {m.shared:g}/n B/cycle per core, start-up "
                                       f"{m.startup} cycles",
                         [f"{pipe}.base", f"{pipe}.shared", f"{pipe}.startup"]))
    if spec.cube is not None:
        cb = spec.cube
        peak = cb.macs_per_cycle.get("fp16", 0) * 2 * spec.cores.aic * spec.clock_hz
        macs = ", ".join(f"{dt} {n:g}" for dt, n in cb.macs_per_cycle.items())
        rows.append(("cube", f"{cb.m}x{cb.k}x{cb.n}; MAC/cycle per core {macs}",
                     ["cube.m", "cube.k", "cube.n"]
                     + [f"cube.macs_per_cycle.{dt}" for dt in cb.macs_per_cycle]))
        if peak:
            # the derivation, so the figure can be checked against a published TFLOPS
            rows.append(("cube peak", f"{peak / 1e12:.4g} TFLOPS fp16 = {cb.macs_per_cycle['fp16']:g} x 2 "
                                      f"x {spec.cores.aic} cores x {spec.clock_hz / 1e6:g} MHz",
                         ["cube.macs_per_cycle.fp16", "cores.aic", "clock_hz"]))
    v = spec.vector
    vec = f"{'/'.join(v.compute_dtypes)}, {v.repeat_bytes} B per repeat"
    keys = ["vector.repeat_bytes"]
    if v.lanes:
        vec += ", lanes " + ", ".join(f"{k} {n}" for k, n in v.lanes.items())
        keys.append("vector.lanes")
    rows.append(("vector", vec, keys))
    if v.lanes and c.architecture == "dsp":
        dt, lanes = next(iter(v.lanes.items()))
        rows.append(("vec peak", f"{lanes * c.dsp * spec.clock_hz / 1e9:g} G {dt} ops/s = {lanes} lanes "
                                 f"x {c.dsp} cores x {spec.clock_hz / 1e6:g} MHz",
                     ["vector.lanes", "cores.dsp", "clock_hz"]))
    launch = spec.launch
    rows.append(("launch", f"{launch.overhead} cycles ({spec.cycles_to_us(launch.overhead):.4g} us)"
                           + (f"; {launch.gap} cycles between a stream's tasks" if launch.gap else ""),
                 ["launch.overhead"] + (["launch.gap"] if launch.gap else [])))
    if spec.host is not None:
        h = spec.host
        rows.append(("host", f"{h.kind} {_gbps(h.bandwidth)} per direction, {h.latency_us:g} us per copy",
                     ["host.bandwidth", "host.latency_us"]))
    for op, table in spec.kernels.items():
        for k, val in table.items():
            shown = _size(val) if isinstance(val, int) and "budget" in k else _num(val)
            rows.append(("kernel", f"{op}.{k} = {shown}", [f"kernels.{op}.{k}"]))
    return rows


def _field_lines(spec: DeviceSpec, notes: _Notes, provenance: bool) -> list[str]:
    """One line per number of the device file: dotted field, value, provenance tag."""
    rows = provenance_rows(spec)
    width = min(max(len(f) for f, *_ in rows) + 2, 46)
    out = ["  every field:"]
    for field_, value, _kind, _text in rows:
        tag = notes.tag(spec, [field_]) if provenance else ""
        if field_.endswith(".base") and field_.split(".")[0] in ("gm", "private", "smc"):
            value = _addr(int(value))   # addresses in hex, as the memory maps give them
        line = f"    {field_:<{width}}{value}"
        out.append(f"{line:<{WIDTH - 8}} {tag}".rstrip() if tag else line)
    return out


def _block(spec: DeviceSpec, provenance: bool, every_field: bool = False) -> list[str]:
    title = f"== {spec.name} "
    lines = [title + "=" * (WIDTH - len(title))]
    lines.append(f"  {'product':<{_LABEL_W}}{spec.product}")
    lines.append(f"  {'SoC':<{_LABEL_W}}{spec.soc}  (family {spec.family}, series {spec.series})")
    notes = _Notes()
    for label, value, keys in _rows(spec):
        if provenance:
            tag = notes.tag(spec, keys)
            line = f"  {label:<{_LABEL_W}}{value:<{_VALUE_W}} {tag}".rstrip()
        else:
            line = f"  {label:<{_LABEL_W}}{value}"
        lines.append(line)
    if every_field:
        lines.extend(_field_lines(spec, notes, provenance))
    if provenance and notes.tags:
        lines.append("  provenance:")
        lines.extend(notes.lines())
        cited = notes.source_lines()
        if cited:
            lines.append("  sources (docs/sources.md#<id>):")
            lines.extend(cited)
    return lines


def catalogue_table(names: list[str] | None = None, *, provenance: bool = True,
                    every_field: bool = False) -> str:
    """A plain-text table of the given devices (default: the whole catalogue).

    ``names`` may hold catalogue names or paths of device files. With ``provenance`` each
    value is followed by a tag (``[S1]`` source, ``[A1]`` assumption, ``[O1]`` override) and
    the tagged texts are printed under each block. ``every_field`` adds one line per number of
    the device file (dotted field, value, tag), the vector cost table included. Lines fit a
    100-column terminal.
    """
    from .spec import catalogue

    if names is None:
        names = catalogue()
    blocks = []
    for name in names:
        spec = name if isinstance(name, DeviceSpec) else load(name)
        blocks.append("\n".join(_block(spec, provenance, every_field)))
    return "\n\n".join(blocks) + "\n"
