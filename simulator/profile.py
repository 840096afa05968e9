"""A profiler client of the execution: what every launch did, per core, pipe, instruction kind
and kernel source line (DESIGN §12, the profiler tables).

:class:`Profiler` is a ``Device.observers`` entry. For every busy instruction a pipe completes
it adds one call, its cycles and (for on-chip moves) its bytes under the key
``(launch, core, pipe, instruction name, origin)``; ``origin`` is the kernel source line when
the device stamps it (``device.source_lines = True``), else None. It also notes the GM addresses
each launch stores to, so a table can tell a launch's outputs from its inputs.

:func:`launch_records` turns a finished device plus its profiler into the plain rows the tables
of :mod:`traces.tables` are built from; the traces layer never sees simulator objects.
"""
from __future__ import annotations

from array import array
from dataclasses import fields, is_dataclass
from typing import Any, Iterator

import numpy as np

from opsim.simulator.cube import CopyGmToL1, Fixpipe, GmMatrix, LoadData
from opsim.simulator.isa import DataCopy, DataCopyPad
from opsim.simulator.tile import GlobalTensor
from opsim.traces.tables import LaunchRecord, TensorInfo

# pipes whose instructions store to GM (a DSP's DMA pipe moves both ways: see on_instruction)
STORE_PIPES = frozenset(("MTE3", "FIXP"))
COPY_PIPES = frozenset(("MTE1", "MTE2", "MTE3", "FIXP", "DMA"))


_L1_PATHS: dict[str, str] = {}


def _l1_path(region: str) -> str:
    """"L1->L0A" for region "L0A": made once per region, not per LoadData (each is profiled)."""
    path = _L1_PATHS.get(region)
    if path is None:
        path = _L1_PATHS[region] = f"L1->{region}"
    return path


# what a busy instruction's row adds besides its call and cycles (Profiler._short): nothing, the
# bytes of a load from GM (``_nbytes``: no on-chip path, no store address), or those of an L1 ->
# L0 move (``_bytes``, and the on-chip path of its destination)
_BYTES_NONE, _BYTES_LOAD, _BYTES_L0 = 0, 1, 2


def _short_kind(cls: type, pname: str, name: Any) -> int:
    """What Profiler.on_instruction adds for an instruction of ``cls`` on pipe ``pname`` besides
    its call and cycles, when that is one of the _BYTES_* kinds; else -1 (the long way)."""
    if pname not in COPY_PIPES and name != "Copy":
        return _BYTES_NONE
    if name == "Copy" or pname in STORE_PIPES or pname == "DMA":
        return -1
    if cls is LoadData and pname == "MTE1":
        return _BYTES_L0
    if (cls is DataCopy or cls is DataCopyPad or cls is CopyGmToL1 or cls is Fixpipe) and pname != "MTE1":
        return _BYTES_LOAD
    return -1


class Profiler:
    """Counts calls, busy cycles and on-chip bytes per (launch, core, pipe, instruction, origin)."""

    # it only adds up its calls: the fast-forward may make them for the instructions of the
    # rounds it skips, in simulated-time order (simulator/fastforward.py)
    fast_forward_safe = True
    # it counts busy instructions only: the pipes do not call it for flags (Core.record)
    busy_only = True

    def __init__(self) -> None:
        self.rows: dict[tuple, list[int]] = {}
        self.on_chip: dict[str, int] = {}             # "L1->L0A", "UB->UB": bytes moved
        self.stores: dict[int, array] = {}            # id(launch) -> GM addresses stored to
        self._launch: Any = None
        self._lid = id(None)
        # (pipe, instruction class, origin) -> (its row in ``rows``, what its bytes are: _SHORT)
        # for the launch seen last and this ``rows`` dict: the row and the bytes' kind found
        # once per such triple, not per instruction (a cube chunk completes ~15 busy ones)
        self._short: dict[tuple, tuple[list[int], int]] = {}
        self._short_rows: dict | None = None

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        if not instr.busy:
            return
        launch = core.launch
        if launch is self._launch and self.rows is self._short_rows:   # (one call less)
            lid = self._lid
        else:
            self._launch, lid = launch, id(launch)
            self._lid = lid
            self._short = {}
            self._short_rows = self.rows
        cls = type(instr)
        # (subscripts and try, not getattr/dict.get: no Python call on the common path)
        try:
            origin = instr.origin
        except AttributeError:      # an instruction class that never set it
            origin = None
        short = self._short
        sk = (pipe, cls, origin)
        if sk in short:
            row, kind = short[sk]
            row[0] += 1
            row[1] += end - start
            if kind == _BYTES_LOAD:
                row[2] += instr._nbytes
            elif kind == _BYTES_L0:
                nbytes = instr._bytes
                row[2] += nbytes
                region = instr.dst.region.name
                path = _L1_PATHS[region] if region in _L1_PATHS else _l1_path(region)
                on_chip = self.on_chip
                on_chip[path] = on_chip[path] + nbytes if path in on_chip else nbytes
            return
        name = instr.name
        pname = pipe.name
        key = (lid, core.name, pname, name, origin)
        rows = self.rows
        try:
            row = rows[key]
        except KeyError:
            row = rows[key] = [0, 0, 0]
        if pipe.core is core and getattr(cls, "name", None) is name and not hasattr(instr, "__dict__"):
            # the row is the same for every instruction of the class (its name is the class's:
            # no instance has a name of its own) on this pipe from this line; the bytes too
            # where they are one slot read (the loads' and the L1 -> L0 moves' below)
            kind = _short_kind(cls, pname, name)
            if kind >= 0:
                short[sk] = (row, kind)
        row[0] += 1
        row[1] += end - start
        if pname in COPY_PIPES or name == "Copy":
            # the bytes of trace_args, read from the slot it returns them from for the classes
            # of nearly every copy (their trace_args also builds the detail text and the address,
            # a few calls each); the address below only where a store needs it
            cls = type(instr)
            addr: int | None
            if cls is LoadData:
                nbytes, addr = instr._bytes, None
            elif cls is DataCopy or cls is DataCopyPad or cls is CopyGmToL1 or cls is Fixpipe:
                nbytes, addr = instr._nbytes, None
            elif pname not in COPY_PIPES:
                # a vector Copy (UB -> UB): its trace_args carry no bytes, like every vector
                # instruction's, so count them here (on_chip "UB->UB" was 0)
                nbytes, addr = instr.count * instr.dst.dtype.itemsize, None
            else:
                _, nbytes, addr, _ = instr.trace_args()
            row[2] += nbytes
            if pname == "MTE1" or name == "Copy":
                # on-chip moves: L1 -> L0A/L0B (LoadData), UB -> UB (Copy)
                if pname == "MTE1":
                    region = instr.dst.region.name
                    path = _L1_PATHS[region] if region in _L1_PATHS else _l1_path(region)
                else:
                    path = "UB->UB"
                on_chip = self.on_chip
                on_chip[path] = on_chip[path] + nbytes if path in on_chip else nbytes
            elif pname in STORE_PIPES or (pname == "DMA" and getattr(instr, "_to_gm", False)):
                if addr is None:
                    # trace_args()[2]: a DataCopy store's contiguous GM slice inline, its start
                    # as GlobalSlice.byte_range computes it; any other the long way
                    t = instr.dst.tensor if (cls is DataCopy or cls is DataCopyPad) and instr._to_gm else None
                    if t is not None and t.is_contiguous:
                        addr = t.addr + (t.offset + instr.dst.start) * t.dtype.itemsize
                    else:
                        addr = instr.trace_args()[2]
                if addr >= 0:
                    # (not setdefault(lid, array("q")): that makes an array for every store)
                    stores = self.stores
                    if lid in stores:
                        stores[lid].append(addr)
                    else:
                        stores[lid] = array("q", (addr,))

    def forget(self, launches: Any) -> None:
        """Drop what was counted for ``launches`` (their records were taken; ids may be reused)."""
        ids = {id(launch) for launch in launches}
        self.rows = {k: v for k, v in self.rows.items() if k[0] not in ids}
        self._short = {}
        for lid in ids:
            self.stores.pop(lid, None)

    def busy(self, launch: Any) -> dict[tuple[str, str], int]:
        """(core, pipe) -> busy cycles of one launch."""
        lid = id(launch)
        out: dict[tuple[str, str], int] = {}
        for (l, core, pipe, _, _), (_, cycles, _) in self.rows.items():
            if l == lid:
                out[(core, pipe)] = out.get((core, pipe), 0) + cycles
        return out

    def instructions(self, launch: Any) -> Iterator[tuple[str, str, str, str | None, int, int, int]]:
        """(core, pipe, instruction, origin, calls, cycles, bytes) of one launch."""
        lid = id(launch)
        for (l, core, pipe, name, origin), (calls, cycles, nbytes) in self.rows.items():
            if l == lid:
                yield core, pipe, name, origin, calls, cycles, nbytes


def _tensors(args: Any, depth: int = 0) -> Iterator[Any]:
    """GM tensors among a launch's arguments (inside tuples, lists, dicts and dataclass instances
    too). A dataclass field with ``metadata={"workspace": True}`` is the kernel's scratch, not an
    operand of the operator: it is left out, and so is any other field's view into it (FLCE's
    ``rows`` are the workspace logits in memory-saving mode, the softmax operand otherwise)."""
    if isinstance(args, (GlobalTensor, GmMatrix)):
        yield args
    elif depth < 3 and isinstance(args, (tuple, list)):
        for a in args:
            yield from _tensors(a, depth + 1)
    elif depth < 3 and isinstance(args, dict):
        for a in args.values():
            yield from _tensors(a, depth + 1)
    elif depth < 3 and is_dataclass(args) and not isinstance(args, type):
        scratch = [_span(t) for f in fields(args) if f.metadata.get("workspace")
                   for t in _tensors(getattr(args, f.name), depth + 1)]
        for f in fields(args):
            if f.metadata.get("workspace"):
                continue
            for t in _tensors(getattr(args, f.name), depth + 1):
                lo, hi = _span(t)
                if not any(lo < w_hi and w_lo < hi for w_lo, w_hi in scratch):
                    yield t


def _span(t: Any) -> tuple[int, int]:
    """Byte range [lo, hi) of the storage a tensor view covers."""
    item = t.dtype.itemsize
    if isinstance(t, GmMatrix):
        lo, hi = t.span(0, t.rows, 0, t.cols)
        return lo, hi
    extent = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.strides)) if t.shape else 1
    lo = t.addr + t.offset * item
    return lo, lo + extent * item


def _info(t: Any) -> TensorInfo:
    if isinstance(t, GmMatrix):
        return TensorInfo((t.rows, t.cols), t.dtype.name, "FRACTAL_NZ" if t.layout == "NZ" else "ND")
    return TensorInfo(tuple(t.shape), t.dtype.name, "ND")


def launch_records(device: Any, profiler: Profiler | None, launches: list | None = None) -> list[LaunchRecord]:
    """One :class:`traces.tables.LaunchRecord` per finished launch of ``device`` (or of
    ``launches``), in launch order, with per-core busy cycles from ``profiler`` when given."""
    spec = device.spec
    out: list[LaunchRecord] = []
    prev_end: dict[int, int] = {}
    for launch in (device.launches if launches is None else launches):
        if launch.end < 0:
            continue
        stores = np.sort(np.frombuffer(profiler.stores.get(id(launch), array("q")), dtype=np.int64)) \
            if profiler is not None else np.zeros(0, np.int64)
        inputs: list[TensorInfo] = []
        outputs: list[TensorInfo] = []
        seen = set()
        for t in _tensors(launch.args):
            lo, hi = _span(t)
            if (lo, hi, t.dtype.name) in seen:
                continue
            seen.add((lo, hi, t.dtype.name))
            i = int(np.searchsorted(stores, lo))
            written = i < len(stores) and stores[i] < hi
            (outputs if written else inputs).append(_info(t))
        stream = launch.stream.index if launch.stream is not None else 0
        # a task queued behind the previous one of its stream begins launch.gap cycles after that
        # one ends: the gap is the task's wait time (msprof's Task Wait Time), not its duration
        begin = launch.issue + launch.gap
        wait = begin - prev_end[stream] if stream in prev_end else 0
        prev_end[stream] = launch.end
        cores: dict[str, int] = {}
        for _, core, start, end in launch.blocks:
            cores[core] = cores.get(core, 0) + end - start
        ratio = device.mix_ratio if launch.unit == "mix" else 0
        out.append(LaunchRecord(
            name=launch.name, op_type=launch.name, unit=launch.unit,
            architecture=spec.cores.architecture, block_dim=launch.block_dim,
            mix_block_dim=launch.block_dim * ratio, stream=stream, issue=begin,
            start=launch.start, end=launch.end, wait=wait, clock_hz=spec.clock_hz,
            inputs=tuple(inputs), outputs=tuple(outputs), core_cycles=cores,
            busy=profiler.busy(launch) if profiler is not None else {},
            link_bytes=dict(launch.link_bytes),
            instructions=tuple(profiler.instructions(launch)) if profiler is not None else (),
            blocks=tuple(sorted(launch.blocks)), l2=spec.l2 is not None))
    return out
