"""``asc.adv``: the Matmul high-level API (``Matmul``, ``MatmulType``, ``register_matmul``,
``TCubeTiling``) over the cube model of simulator/cube.py.

Where the cube work runs:

- a cube-only kernel (``matmul_cube_only=True``), or a part whose AI cores have every pipe: the
  calling core issues the matmul's instructions itself;
- a mixed kernel: as in Ascend C, the vector cores are the clients and their cube core is the
  server. ``register_matmul`` on the cube core serves its vector cores' requests and then ends
  the kernel there (REGIST_MATMUL_OBJ). A request travels as a Python message plus a
  cross-core hand-off in simulated time (``KfcSetFlag``/``KfcWaitFlag``, simulator/isa_ext.py):
  the cube core's scalar unit polls its queue (``KfcPoll``), so it can only issue a request's
  instructions once the vector core has dispatched it. ``iterate_all(c)`` writes C to GM and
  answers "done"; ``iterate()`` + ``get_tensor_c(ub)`` hands base tiles to the vector core
  through two GM workspace slots per vector core (Fixpipe -> GM on the cube core, DataCopy GM ->
  UB on the vector core, "ready"/"free" hand-offs), so the cube computes tile i+1 while the
  vector core works on tile i.

A tile is computed as the built-in kernels do: GM -> L1 (ND -> NZ) on MTE2 in chunks of
``base_k * step_k`` columns, L1 -> L0A/L0B on MTE1 per ``base_k`` slice, Mmad on CUBE
accumulating in L0C (fp32), Fixpipe L0C -> GM rounding once to C's dtype. Tiles are visited
M first (``count % (single_core_m / base_m)`` is the M index).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator

from opsim.asc import _core
from opsim.asc.enums import CubeFormat, TPosition
from opsim.asc.fwk import TQue
from opsim.asc.tensor import GlobalTensor, LocalTensor
from opsim.simulator import numerics as nx
from opsim.simulator.cube import CopyGmToL1, Fixpipe, GmMatrix, LoadData, Mmad, nz_bytes
from opsim.simulator.errors import SimulatorError
from opsim.simulator.isa import DataCopy, SetFlag, WaitFlag
from opsim.simulator.isa_ext import BiasFill, KfcPoll, KfcSetFlag, KfcWaitFlag
from opsim.simulator.tile import GlobalSlice, GlobalTensor as SimGlobalTensor


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


class TilingInt(int):
    """A tiling field: an int with ``.ceildiv(d)`` as pyasc's tiling values have."""

    def ceildiv(self, d: int) -> int:
        return _cdiv(self, d)


class TCubeTiling:
    """``asc.adv.TCubeTiling()``: filled by ``host.MultiCoreMatmulTiling.get_tiling``."""

    FIELDS = ("used_core_num", "m", "n", "k_a", "k_b", "single_core_m", "single_core_n", "single_core_k",
              "base_m", "base_n", "base_k", "step_m", "step_n", "step_ka", "step_kb", "depth_a1", "depth_b1",
              "is_bias", "iterate_order", "db_l0c")
    # the FIELDS, each a TilingInt (set by __init__ / fill)
    used_core_num: TilingInt
    m: TilingInt
    n: TilingInt
    k_a: TilingInt
    k_b: TilingInt
    single_core_m: TilingInt
    single_core_n: TilingInt
    single_core_k: TilingInt
    base_m: TilingInt
    base_n: TilingInt
    base_k: TilingInt
    step_m: TilingInt
    step_n: TilingInt
    step_ka: TilingInt
    step_kb: TilingInt
    depth_a1: TilingInt
    depth_b1: TilingInt
    is_bias: TilingInt
    iterate_order: TilingInt
    db_l0c: TilingInt

    def __init__(self, **values: int) -> None:
        for f in self.FIELDS:
            setattr(self, f, TilingInt(0))
        self.fill(**values)

    def fill(self, **values: int) -> None:
        for k, v in values.items():
            if k not in self.FIELDS:
                raise TypeError(f"TCubeTiling has no field {k!r}")
            setattr(self, k, TilingInt(int(v)))

    def __repr__(self) -> str:
        return "TCubeTiling(" + ", ".join(f"{f}={int(getattr(self, f))}" for f in self.FIELDS) + ")"


@dataclass(frozen=True)
class MatmulType:
    """``asc.adv.MatmulType(position, format, dtype, is_trans=False)``."""
    position: TPosition = TPosition.GM
    format: CubeFormat = CubeFormat.ND
    dtype: Any = None
    is_trans: bool = False


# ---------------------------------------------------------------------------------------------
# mixed launches: the message group of one cube core and its vector cores
# ---------------------------------------------------------------------------------------------

class Mailbox:
    """A cube core's Matmul message queue (messages in the order the vector cores sent them)."""

    def __init__(self) -> None:
        self.items: deque = deque()
        self._ev: Any = None
        self.closed = False

    def close(self) -> None:
        """The server is done: polls still queued on its scalar pipe complete at once."""
        self.closed = True
        if self._ev is not None:
            ev, self._ev = self._ev, None
            ev.succeed()

    def post(self, msg: Any) -> None:
        self.items.append(msg)
        if self._ev is not None:
            ev, self._ev = self._ev, None
            ev.succeed()

    def event(self, env: Any) -> Any:
        if self.items or self.closed:
            return None
        if self._ev is None:
            self._ev = env.event()
        return self._ev


class Group:
    def __init__(self, ratio: int) -> None:
        self.ratio = ratio
        self.mailbox = Mailbox()


def group_of(plan: Any, ctx: Any, role: str) -> Group:
    ratio = plan.device.mix_ratio
    b = ctx.block_idx if role == "aic" else ctx.block_idx // ratio
    g = plan.groups.get(b)
    if g is None:
        g = plan.groups[b] = Group(ratio)
    return g


@dataclass
class _Operands:
    """One matmul request: the block's operands and its extent."""
    a: GmMatrix
    trans_a: bool
    b: GmMatrix
    trans_b: bool
    bias: GmMatrix | None
    rows: int
    cols: int
    k: int


# ---------------------------------------------------------------------------------------------
# the cube-side engine: the instructions of the base tiles
# ---------------------------------------------------------------------------------------------

class _CubeEngine:
    """L1/L0 queues of one cube core and the instructions of one base tile."""

    def __init__(self, state: _core.BlockState, tiling: TCubeTiling, dt: nx.DType) -> None:
        self.state, self.t, self.dt = state, tiling, dt
        item = dt.itemsize
        bm, bn, bk = int(tiling.base_m), int(tiling.base_n), int(tiling.base_k)
        self.kc = bk * max(1, int(tiling.step_ka))
        self.qa1 = self._queue(TPosition.A1, 2, nz_bytes(bm, self.kc, item))
        self.qb1 = self._queue(TPosition.B1, 2, nz_bytes(self.kc, bn, item))
        self.qa2 = self._queue(TPosition.A2, 2, nz_bytes(bm, bk, item))
        self.qb2 = self._queue(TPosition.B2, 2, nz_bytes(bk, bn, item))
        self.qc = self._queue(TPosition.CO1, max(1, int(tiling.db_l0c) or 1), nz_bytes(bm, bn, 4))
        self.ev_cube_mte2 = state.reserved_event("CUBE", "MTE2")
        self.ev_mte2_cube = state.reserved_event("MTE2", "CUBE")

    def _queue(self, pos: TPosition, depth: int, nbytes: int) -> TQue:
        q = TQue(pos, depth)
        q._init(self.state, depth, nbytes)
        return q

    def tiles(self, ops: _Operands) -> list[tuple[int, int]]:
        bm, bn = int(self.t.base_m), int(self.t.base_n)
        return [(tm, tn) for tn in range(_cdiv(ops.cols, bn)) for tm in range(_cdiv(ops.rows, bm))]

    def tile(self, ops: _Operands, tm: int, tn: int, out: Any, site: str) -> None:
        """Emit the instructions of base tile (tm, tn); ``out(acc, m0, n0, ml, nl)`` stores it."""
        st, dt = self.state, self.dt
        bm, bn, bk = int(self.t.base_m), int(self.t.base_n), int(self.t.base_k)
        m0, n0 = tm * bm, tn * bn
        ml, nl = min(bm, ops.rows - m0), min(bn, ops.cols - n0)
        acc = self.qc.alloc_tensor(nx.FP32)
        first = True
        if ops.bias is not None:
            st.emit(SetFlag("CUBE", "MTE2", self.ev_cube_mte2), site)
            st.emit(WaitFlag("CUBE", "MTE2", self.ev_cube_mte2), site)
            st.emit(BiasFill(acc.sim, ops.bias, n0, ml, nl), site)
            st.emit(SetFlag("MTE2", "CUBE", self.ev_mte2_cube), site)
            st.emit(WaitFlag("MTE2", "CUBE", self.ev_mte2_cube), site)
            first = False
        for k0 in range(0, ops.k, self.kc):
            kk = min(self.kc, ops.k - k0)
            a1 = self.qa1.alloc_tensor(dt)
            if ops.trans_a:
                st.emit(CopyGmToL1(a1.sim, ops.a, k0, kk, m0, ml), site)
            else:
                st.emit(CopyGmToL1(a1.sim, ops.a, m0, ml, k0, kk), site)
            self.qa1.enque(a1)
            b1 = self.qb1.alloc_tensor(dt)
            if ops.trans_b:
                st.emit(CopyGmToL1(b1.sim, ops.b, n0, nl, k0, kk), site)
            else:
                st.emit(CopyGmToL1(b1.sim, ops.b, k0, kk, n0, nl), site)
            self.qb1.enque(b1)
            a1 = self.qa1.deque(dt)
            b1 = self.qb1.deque(dt)
            for s in range(0, kk, bk):
                ks = min(bk, kk - s)
                a2 = self.qa2.alloc_tensor(dt)
                if ops.trans_a:
                    st.emit(LoadData(a2.sim, a1.sim, kk, ml, s, ks, 0, ml, transpose=True), site)
                else:
                    st.emit(LoadData(a2.sim, a1.sim, ml, kk, 0, ml, s, ks), site)
                self.qa2.enque(a2)
                b2 = self.qb2.alloc_tensor(dt)
                if ops.trans_b:
                    st.emit(LoadData(b2.sim, b1.sim, nl, kk, 0, nl, s, ks, transpose=True), site)
                else:
                    st.emit(LoadData(b2.sim, b1.sim, kk, nl, s, ks, 0, nl), site)
                self.qb2.enque(b2)
                a2 = self.qa2.deque(dt)
                b2 = self.qb2.deque(dt)
                st.emit(Mmad(acc.sim, a2.sim, b2.sim, ml, ks, nl, accumulate=not first), site)
                first = False
                self.qa2.free_tensor(a2)
                self.qb2.free_tensor(b2)
            self.qa1.free_tensor(a1)
            self.qb1.free_tensor(b1)
        self.qc.enque(acc)
        acc = self.qc.deque(nx.FP32)
        out(acc, m0, n0, ml, nl)
        self.qc.free_tensor(acc)


def _gm(g: GlobalTensor, rows: int, cols: int, stride: int) -> GmMatrix:
    a = g._addr
    return GmMatrix(a.device, g.address, a.dtype.sim, int(rows), int(cols), "ND", int(stride), 1, 0)


# ---------------------------------------------------------------------------------------------
# the Matmul object
# ---------------------------------------------------------------------------------------------

class Matmul:
    """``asc.adv.Matmul(a=MatmulType(...), b=..., c=..., bias=...)``."""

    def __init__(self, a: MatmulType | None = None, b: MatmulType | None = None, c: MatmulType | None = None,
                 bias: MatmulType | None = None, *args: Any, **kwargs: Any) -> None:
        self.state = _core.current()
        self.a_type, self.b_type, self.c_type, self.bias_type = a, b, c, bias
        self.tiling: TCubeTiling | None = None
        self._a: GlobalTensor | None = None
        self._b: GlobalTensor | None = None
        self._bias: GlobalTensor | None = None
        self._trans_a = bool(a.is_trans) if a is not None else False
        self._trans_b = bool(b.is_trans) if b is not None else False
        self._tail: tuple[int, int, int] | None = None
        self._engine: _CubeEngine | None = None
        self._slots: list[int] | None = None
        self._count = 0

    # -- set-up --------------------------------------------------------------------------------
    def init(self, tiling: TCubeTiling, *args: Any) -> None:
        self.tiling = tiling

    def set_tensor_a(self, gm: GlobalTensor, is_transpose_a: bool = False) -> None:
        self._a, self._trans_a = gm, bool(is_transpose_a)

    def set_tensor_b(self, gm: GlobalTensor, is_transpose_b: bool = False) -> None:
        self._b, self._trans_b = gm, bool(is_transpose_b)

    def set_bias(self, gm: GlobalTensor) -> None:
        self._bias = gm

    def disable_bias(self) -> None:
        self._bias = None

    def set_tail(self, tail_m: int = -1, tail_n: int = -1, tail_k: int = -1) -> None:
        self._tail = (int(tail_m), int(tail_n), int(tail_k))

    def set_org_shape(self, *args: int) -> None:
        raise _core.unsupported("Matmul.set_org_shape", "plan the shapes with host.MultiCoreMatmulTiling")

    def _operands(self) -> _Operands:
        t = self.tiling
        if t is None:
            raise SimulatorError(f"Matmul used before register_matmul (at {_core.call_site()})")
        if self._a is None or self._b is None:
            raise SimulatorError(f"Matmul needs set_tensor_a and set_tensor_b first (at {_core.call_site()})")
        rows, cols, k = int(t.single_core_m), int(t.single_core_n), int(t.single_core_k or t.k_a)
        if self._tail is not None:
            tm, tn, tk = self._tail
            rows = tm if tm > 0 else rows
            cols = tn if tn > 0 else cols
            k = tk if tk > 0 else k
        a = _gm(self._a, k, rows, int(t.m)) if self._trans_a else _gm(self._a, rows, k, int(t.k_a))
        b = _gm(self._b, cols, k, int(t.k_b)) if self._trans_b else _gm(self._b, k, cols, int(t.n))
        bias = _gm(self._bias, 1, cols, cols) if (self._bias is not None and int(t.is_bias)) else None
        if bias is not None and bias.dtype != nx.FP32:
            raise _core.unsupported(f"a {bias.dtype} matmul bias", "the bias is fp32")
        return _Operands(a, self._trans_a, b, self._trans_b, bias, rows, cols, k)

    def _local(self) -> bool:
        """Whether this core issues the cube instructions itself."""
        return "CUBE" in self.state.core.pipes

    def _engine_for(self, dt: nx.DType) -> _CubeEngine:
        if self._engine is None:
            assert self.tiling is not None      # _operands() checked it (every caller calls it first)
            self._engine = _CubeEngine(self.state, self.tiling, dt)
        return self._engine

    # -- computing ---------------------------------------------------------------------------------
    def iterate_all(self, gm: GlobalTensor, en_atomic: int = 0, *args: Any, **kwargs: Any) -> None:
        """All base tiles of this block's C into ``gm`` (row stride ``tiling.n``)."""
        if en_atomic:
            raise _core.unsupported("Matmul.iterate_all with atomic accumulation")
        site = _core.call_site()
        ops = self._operands()
        assert self.tiling is not None          # _operands() checked it
        c = _gm(gm, ops.rows, ops.cols, int(self.tiling.n))
        if self._local():
            serve_all(self.state, self._engine_for(ops.a.dtype), ops, c, site)
            return
        st = self.state
        sub = st.ctx.sub_block_idx
        st.group.mailbox.post(("all", sub, (self.tiling, ops, c)))
        st.emit(KfcSetFlag("req", sub, st.core.store_pipe), site)
        st.emit(KfcWaitFlag("done", sub, st.core.load_pipe), site)

    def iterate(self, *args: Any, **kwargs: Any) -> "_TileLoop":
        """The base tiles one by one: use as ``with mm.iterate() as count:`` (opsim.asc runs the
        body once per tile) or ``for count in mm.iterate():``; ``get_tensor_c`` fetches the tile."""
        return _TileLoop(self._iterate())

    def _iterate(self) -> Iterator[int]:
        st = self.state
        if self._local() and "VECTOR" not in st.core.pipes:
            raise _core.unsupported("Matmul.iterate/get_tensor_c on a core without a vector unit",
                                    "use iterate_all, or a mixed kernel")
        site = _core.call_site()
        ops = self._operands()
        t = self.tiling
        assert t is not None                    # _operands() checked it
        sub = st.ctx.sub_block_idx
        n_tiles = _cdiv(ops.rows, int(t.base_m)) * _cdiv(ops.cols, int(t.base_n))
        if self._slots is None:
            nbytes = int(t.base_m) * int(t.base_n) * 4
            self._slots = [st.launch.device.malloc(nbytes, name=f"matmul workspace aiv{st.ctx.block_idx}.{i}")
                           for i in range(2)]
        if self._local():
            # an AI core with every pipe: compute each tile here, hand it FIXP -> MTE2 in place
            # of the cross-core messages
            yield from self._iterate_here(ops, n_tiles, site)
            return
        st.group.mailbox.post(("iter", sub, (self.tiling, ops, self._slots)))
        st.emit(KfcSetFlag("req", sub, st.core.store_pipe), site)
        for count in range(n_tiles):
            self._count = count
            yield count

    def _iterate_here(self, ops: _Operands, n_tiles: int, site: str) -> Iterator[int]:
        st = self.state
        engine = self._engine_for(ops.a.dtype)
        assert self.tiling is not None and self._slots is not None   # _iterate set both up
        bm, bn = int(self.tiling.base_m), int(self.tiling.base_n)
        self._ev_ready = st.reserved_event("FIXP", st.core.load_pipe)
        self._ev_free = st.reserved_event(st.core.load_pipe, "FIXP")
        for count, (tm, tn) in enumerate(engine.tiles(ops)):
            ws = GmMatrix(st.launch.device, self._slots[count % 2], nx.FP32, bm, bn, "ND", bn, 1, 0)

            def out(acc: LocalTensor, m0: int, n0: int, ml: int, nl: int, ws: GmMatrix = ws, i: int = count) -> None:
                if i >= 2:
                    st.emit(WaitFlag(st.core.load_pipe, "FIXP", self._ev_free), site)
                st.emit(Fixpipe(ws, 0, 0, acc.sim, ml, nl), site)
                st.emit(SetFlag("FIXP", st.core.load_pipe, self._ev_ready), site)
            engine.tile(ops, tm, tn, out, site)
            self._count = count
            yield count
        for _ in range(min(2, n_tiles)):        # take back the last slots' free hand-offs
            st.emit(WaitFlag(st.core.load_pipe, "FIXP", self._ev_free), site)

    def get_tensor_c(self, dst: LocalTensor, en_atomic: int = 0, en_sequential_write: bool = False,
                     *args: Any, **kwargs: Any) -> None:
        """The current base tile (fp32, base_m x base_n row-major) into local memory ``dst``."""
        st = self.state
        if self._slots is None:
            raise SimulatorError(f"get_tensor_c outside an iterate() loop (at {_core.call_site()})")
        site = _core.call_site()
        t = self.tiling
        assert t is not None                    # iterate() checked it (the slots exist)
        sub = st.ctx.sub_block_idx
        n = int(t.base_m) * int(t.base_n)
        if dst.sim.dtype != nx.FP32:
            raise _core.unsupported(f"get_tensor_c into {dst.sim.dtype}", "C is fp32 here")
        ev = st.reserved_event("VECTOR", st.core.load_pipe)
        st.emit(SetFlag("VECTOR", st.core.load_pipe, ev), site)      # earlier vector work on dst is done
        st.emit(WaitFlag("VECTOR", st.core.load_pipe, ev), site)
        local = self._local()
        if local:
            st.emit(WaitFlag("FIXP", st.core.load_pipe, self._ev_ready), site)
        else:
            st.emit(KfcWaitFlag("ready", sub, st.core.load_pipe), site)
        slot = self._slots[self._count % 2]
        g = SimGlobalTensor(st.launch.device, slot, nx.FP32, (n,), (1,), 0)
        st.emit(DataCopy(dst.sim, GlobalSlice(g, 0, n), n), site)
        if local:
            st.emit(SetFlag(st.core.load_pipe, "FIXP", self._ev_free), site)
        else:
            st.emit(KfcSetFlag("free", sub, st.core.load_pipe), site)
        ev2 = st.reserved_event(st.core.load_pipe, "VECTOR")
        st.emit(SetFlag(st.core.load_pipe, "VECTOR", ev2), site)
        st.emit(WaitFlag(st.core.load_pipe, "VECTOR", ev2), site)

    def end(self) -> None:
        if not self._local():
            self.state.group.mailbox.post(("end", self.state.ctx.sub_block_idx, None))


class _TileLoop:
    """What ``iterate()`` returns: iterable over the tile counts. As a context manager it would
    run its body once; @asc.jit rewrites ``with mm.iterate() as count:`` into a loop, and where it
    cannot (no source, a closure) the ``with`` form is refused rather than run once."""

    def __init__(self, it: Iterator[int]) -> None:
        self._it = it

    def __iter__(self) -> Iterator[int]:
        return self._it

    def __enter__(self) -> int:
        raise _core.unsupported("'with matmul.iterate() as count:' in a kernel whose source opsim cannot "
                                "rewrite (no source file, or a closure)",
                                "write 'for count in matmul.iterate():'")

    def __exit__(self, *exc: Any) -> None:
        return None


def serve_all(state: _core.BlockState, engine: _CubeEngine, ops: _Operands, c: GmMatrix, site: str) -> None:
    def out(acc: LocalTensor, m0: int, n0: int, ml: int, nl: int) -> None:
        state.emit(Fixpipe(c, m0, n0, acc.sim, ml, nl), site)
    for tm, tn in engine.tiles(ops):
        engine.tile(ops, tm, tn, out, site)


def _iter_tiles(state: _core.BlockState, engine: _CubeEngine, ops: _Operands, slots: list[int], sub: int,
                site: str) -> Iterator[None]:
    """The tiles of an ``iterate()`` request, one per step, each handed over in a workspace slot."""
    t = engine.t
    bm, bn = int(t.base_m), int(t.base_n)
    for i, (tm, tn) in enumerate(engine.tiles(ops)):
        ws = GmMatrix(state.launch.device, slots[i % 2], nx.FP32, bm, bn, "ND", bn, 1, 0)

        def out(acc: LocalTensor, m0: int, n0: int, ml: int, nl: int, ws: GmMatrix = ws, i: int = i) -> None:
            if i >= 2:   # the vector core has taken the tile that was in this slot
                state.emit(KfcWaitFlag("free", sub, "FIXP"), site)
            state.emit(Fixpipe(ws, 0, 0, acc.sim, ml, nl), site)
            state.emit(KfcSetFlag("ready", sub, "FIXP"), site)
        engine.tile(ops, tm, tn, out, site)
        yield None


def serve(state: _core.BlockState, matmul: Matmul) -> None:
    """The cube core of a mixed kernel: serve the group's vector cores, then end the kernel."""
    group: Group = state.group
    site = _core.call_site()
    exited: set[int] = set()
    active: dict[int, Iterator[None]] = {}
    while True:
        while group.mailbox.items:
            kind, sub, payload = group.mailbox.items.popleft()
            if kind == "exit":
                exited.add(sub)
            elif kind == "end":
                pass
            elif kind == "all":
                tiling, ops, c = payload
                matmul.tiling = matmul.tiling or tiling
                engine = matmul._engine_for(ops.a.dtype)
                state.emit(KfcWaitFlag("req", sub, "MTE2"), site)
                serve_all(state, engine, ops, c, site)
                state.emit(KfcSetFlag("done", sub, "FIXP"), site)
            elif kind == "iter":
                tiling, ops, slots = payload
                matmul.tiling = matmul.tiling or tiling
                engine = matmul._engine_for(ops.a.dtype)
                state.emit(KfcWaitFlag("req", sub, "MTE2"), site)
                active[sub] = _iter_tiles(state, engine, ops, slots, sub, site)
        if active:
            for sub in sorted(active):       # one tile per client in turn
                if next(active[sub], StopIteration) is StopIteration:
                    del active[sub]
            continue
        if len(exited) >= group.ratio:
            group.mailbox.close()
            break
        state.emit(KfcPoll(group.mailbox), site)
        state.flush()
    raise _core.KernelExit


def register_matmul(pipe: Any, matmul: Matmul, tiling: TCubeTiling, *args: Any, **kwargs: Any) -> None:
    """``REGIST_MATMUL_OBJ``: bind the tiling; on the cube core of a mixed kernel, serve the
    vector cores' requests and end the kernel there."""
    matmul.tiling = tiling
    st = matmul.state
    if st.role == "aic" and st.launch.kind == "mix":
        serve(st, matmul)


__all__ = ["Matmul", "MatmulType", "TCubeTiling", "register_matmul"]


def __getattr__(name: str) -> object:
    # a pyasc adv API opsim does not model: say so, naming the kernel line (opsim.asc.pyasc_names)
    from opsim.asc.pyasc_names import ADV, refuse     # (not `from opsim.asc import`: that calls this)
    if name in ADV:
        raise refuse("asc.adv", name, ADV)
    raise AttributeError(f"module 'opsim.asc.adv' has no attribute {name!r}")
