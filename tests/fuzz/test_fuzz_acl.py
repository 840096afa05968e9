"""Fuzzing the ACL and aclnn C-style boundary: sequences of calls on two runtimes, each
argument valid, stale or garbage. Every call must return a documented status code (never
raise), a call with a handle that is no longer valid -- destroyed, freed, from before
aclFinalize / aclrtResetDevice, or of the other runtime -- must never report success, and no
call may change a byte of either device's memory outside its outputs (a copy's destination;
the out tensors and workspace of an operator that was launched).

The test keeps its own model of which handles are valid (runtime, device generation, live
allocation, destroyed), written from the API's contract, not from the code under test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsim.kernels import aclnn
from opsim.simulator import acl
from opsim.simulator.acl import AclRuntime, AclTensor

from fuzz_harness import COUNTS, _python_text, c_int, changed_outside, fuzz_settings, garbage, record, snapshot

ACL_CODES = {0, 100000, 100001, 100002, 100037, 200000, 200003, 107000, 107001, 507015}
ACLNN_CODES = {0, 161001, 161002, 361001, 561002}
BUF = 512            # bytes of each buffer the session starts with
SHAPE = [4, 8]       # 32 fp32 elements = 128 B


@dataclass
class Handle:
    """The test's own view of a tensor or stream: who made it, on which device, over what."""

    obj: Any
    owner: str                 # "rt" | "other"
    gen: int                   # the owner's device generation when it was made
    alloc: int | None = None   # serial of the allocation the tensor's data lies in
    nbytes: int = 0            # storage bytes of a tensor
    destroyed: bool = False


@dataclass
class Session:
    rt: AclRuntime
    other: AclRuntime
    gen: dict[str, int] = field(default_factory=lambda: {"rt": 1, "other": 1})
    live: dict[str, bool] = field(default_factory=lambda: {"rt": True, "other": True})
    allocs: dict[int, tuple[int, int, str]] = field(default_factory=dict)   # serial -> (ptr, size, owner)
    serial: int = 0
    tensors: list[Handle] = field(default_factory=list)
    streams: list[Handle] = field(default_factory=list)
    executors: list[ExecEntry] = field(default_factory=list)
    pending: dict[str, list[tuple[str, int, int]]] = field(default_factory=lambda: {"rt": [], "other": []})

    def runtime(self, owner: str) -> AclRuntime:
        return self.rt if owner == "rt" else self.other

    def alloc_of(self, owner: str, ptr: int) -> int | None:
        for s, (p, n, o) in self.allocs.items():
            if o == owner and p <= ptr < p + n:
                return s
        return None

    def valid_tensor(self, h: Handle, owner: str, *, destroyed_ok: bool = False) -> bool:
        return (h.owner == owner and h.gen == self.gen[owner] and self.live[owner]
                and (destroyed_ok or not h.destroyed)
                and (h.alloc is None or h.alloc in self.allocs))

    def valid_stream(self, h: Handle, owner: str) -> bool:
        return h.owner == owner and h.gen == self.gen[owner] and self.live[owner] and not h.destroyed


@dataclass(frozen=True)
class AllocRef:
    serial: int
    ptr: int


@dataclass(frozen=True)
class ExecEntry:
    executor: Any
    owner: str
    gen: int
    tensors: list                 # the out tensor first, then every tensor operand


def _eq(value: Any, n: int) -> bool:
    """value is the integer n (garbage may be an array, whose == is elementwise)."""
    return isinstance(value, int) and not isinstance(value, bool) and value == n


def _code(result: Any) -> Any:
    return result[-1] if isinstance(result, tuple) else result


def c_call(s: Session, name: str, fn: Any, codes: set[int], *, garbage_args: bool,
           must_fail: bool = False, outputs: Any = None, tensor_result: bool = False) -> Any:
    """One C-style call: it must not raise, must return one of ``codes`` (or a tensor/None for
    aclCreateTensor), must not succeed when ``must_fail``, and may change memory only inside
    ``outputs(result)`` -> [(owner, addr, nbytes)]."""
    COUNTS["c.calls"] += 1
    if garbage_args:
        COUNTS["c.garbage_calls"] += 1
    devs = {o: s.runtime(o).device for o in ("rt", "other")}
    before = {o: snapshot(d) for o, d in devs.items() if d is not None}
    errors_before = {o: (len(s.runtime(o).errors), s.runtime(o).errors[-1] if s.runtime(o).errors else None)
                     for o in ("rt", "other")}
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - counting is the point
        record("c.raises", f"{name}: {type(exc).__name__}: {exc}")
        raise AssertionError(f"{name} raised {type(exc).__name__}: {exc}") from exc
    if tensor_result:
        ok = result is not None
        assert result is None or isinstance(result, AclTensor), f"{name} returned {result!r}"
    else:
        code = _code(result)
        if code not in codes:
            record("c.undocumented_codes", f"{name}: {code!r}")
            raise AssertionError(f"{name} returned undocumented status {code!r}: "
                                 f"{s.rt.aclGetRecentErrMsg()}")
        ok = code == 0
    if ok:
        COUNTS[f"c.ok.{name}"] += 1
    for o in ("rt", "other"):
        _python_text(s.runtime(o).errors, errors_before[o], name)
    if must_fail:
        COUNTS["c.listed_cases"] += 1
        if ok:
            record("c.false_successes", name)
            raise AssertionError(f"{name} reported success for a call that must fail")
    allowed = list(outputs(result)) if (outputs is not None) else []
    for o, d in devs.items():
        if d is None or s.runtime(o).device is not d:
            continue        # the device was released by this call: its memory went with it
        n = changed_outside(before[o], snapshot(d), [("GM", a, b) for oo, a, b in allowed if oo == o])
        COUNTS["c.bytes_changed_outside_outputs"] += n
        if n:
            record("c.bytes_changed", f"{name}: {n} B on {o}")
            raise AssertionError(f"{name} changed {n} bytes of {o}'s memory outside its outputs")
    return result


def pick(data: Any, items: list, extra: st.SearchStrategy | None = None) -> Any:
    options = [st.sampled_from(items)] if items else []
    options.append(extra if extra is not None else garbage())
    return data.draw(st.one_of(*options))


def setup(seed: int) -> Session:
    s = Session(AclRuntime("atlas-a2", trace_level="off", seed=seed),
                AclRuntime("atlas-a2", trace_level="off", seed=seed))
    for owner in ("rt", "other"):
        r = s.runtime(owner)
        assert r.aclInit() == 0 and r.aclrtSetDevice(0) == 0
        stage(s, owner, seed)
    return s


def stage(s: Session, owner: str, seed: int = 0) -> None:
    """A stream, five fp32 [4, 8] tensors and one int32 [8] tensor over fresh buffers (not
    counted as fuzz calls: this is the session's known-good state on a new device)."""
    rng = np.random.default_rng(seed)
    r = s.runtime(owner)
    gen = s.gen[owner]
    if True:
        st_, ret = r.aclrtCreateStream()
        s.streams.append(Handle(st_, owner, gen))
        for _ in range(5):
            ptr, ret = r.aclrtMalloc(BUF)
            s.serial += 1
            s.allocs[s.serial] = (ptr, BUF, owner)
            data = rng.uniform(0.05, 0.95, BUF // 4).astype(np.float32)
            assert r.aclrtMemcpy(ptr, BUF, data, BUF, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
            t = r.aclCreateTensor(SHAPE, acl.ACL_FLOAT, None, 0, 2, SHAPE, ptr)
            s.tensors.append(Handle(t, owner, gen, s.serial, 128))
        ptr, _ = r.aclrtMalloc(BUF)
        s.serial += 1
        s.allocs[s.serial] = (ptr, BUF, owner)
        assert r.aclrtMemcpy(ptr, BUF, np.arange(BUF // 4, dtype=np.int32) % 3, BUF, 1) == 0
        t = r.aclCreateTensor([8], acl.ACL_INT32, None, 0, 2, [8], ptr)
        s.tensors.append(Handle(t, owner, gen, s.serial, 32))


# -- actions: each one C call -----------------------------------------------------------------

def act_malloc(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    bad = data.draw(st.booleans())
    size = data.draw(garbage()) if bad else data.draw(st.integers(1, 4096))
    r = s.runtime(owner)
    ptr, ret = c_call(s, "aclrtMalloc", lambda: r.aclrtMalloc(size), ACL_CODES, garbage_args=bad)
    if ret == 0:
        s.serial += 1
        s.allocs[s.serial] = (ptr, int(size), owner)


def act_free(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    ptrs = [AllocRef(sr, p) for sr, (p, n, o) in s.allocs.items()]
    choice = pick(data, ptrs)
    bad = not isinstance(choice, AllocRef)
    ptr = choice.ptr if not bad else choice
    # an address is a number: the other runtime's device may have an allocation at the same one
    same = [sr for sr, (p, n, o) in s.allocs.items() if o == owner and not bad and _eq(ptr, p)]
    mine = bool(same) and s.live[owner]
    size = s.allocs[same[0]][1] if same else 0
    ret = c_call(s, "aclrtFree", lambda: s.runtime(owner).aclrtFree(ptr), ACL_CODES, garbage_args=bad,
                 must_fail=not mine, outputs=lambda _: [(owner, ptr, size)] if same else [])
    if ret == 0:
        del s.allocs[same[0]]


def act_memcpy(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    r = s.runtime(owner)
    kind = data.draw(st.one_of(st.integers(0, 3), garbage()))
    ptrs = [p + data.draw(st.sampled_from((0, 4, 100))) for (p, n, o) in s.allocs.values() if o == owner]
    host = np.zeros(64, np.float32)
    hosts = [host, host[::2], np.zeros((4, 4), np.float16), np.arange(16, dtype=np.int32), bytes(64)]
    if data.draw(st.booleans()) and ptrs:    # a well-formed copy
        kind = data.draw(st.integers(0, 3))
        dst = data.draw(st.sampled_from(ptrs)) if kind in (1, 3) else np.zeros(64, np.float32)
        src = data.draw(st.sampled_from(ptrs)) if kind in (2, 3) else np.arange(64, dtype=np.float32)
        count = data.draw(st.integers(0, 256))
        dmax = count
    else:
        dst = pick(data, ptrs + hosts)
        src = pick(data, ptrs + hosts)
        count = data.draw(st.one_of(st.integers(-8, 300), garbage()))
        dmax = data.draw(st.one_of(st.just(count), st.integers(0, 300), garbage()))
    listed = c_int(count) and count < 0
    non_contig = isinstance(dst, np.ndarray) and not dst.flags.c_contiguous and (_eq(kind, 0) or _eq(kind, 2)) \
        and not _eq(count, 0)
    if isinstance(dst, np.ndarray):
        dst = dst.copy() if dst.flags.c_contiguous else np.zeros(64, np.float32)[::2]
    bad = not all(isinstance(v, (int, np.ndarray, bytes)) for v in (dst, src)) or not isinstance(count, int)
    out = [(owner, int(dst), int(count))] if c_int(dst) and c_int(count) and count > 0 else []
    # a copy takes simulated time on the host link, during which kernels already queued on this
    # runtime's streams keep running: their outputs may change too
    out += list(s.pending[owner])
    c_call(s, "aclrtMemcpy", lambda: r.aclrtMemcpy(dst, dmax, src, count, kind), ACL_CODES,
           garbage_args=bad, must_fail=listed or non_contig, outputs=lambda _: out)


def act_create_tensor(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    r = s.runtime(owner)
    ptrs = [p for (p, n, o) in s.allocs.values() if o == owner]
    dims = data.draw(st.one_of(st.just(SHAPE), st.lists(st.integers(-1, 6), max_size=3), garbage()))
    dtype = data.draw(st.one_of(st.sampled_from((acl.ACL_FLOAT, acl.ACL_FLOAT16, acl.ACL_INT32, 27)), garbage()))
    stride = data.draw(st.one_of(st.none(), st.lists(st.integers(-2, 9), max_size=3), garbage()))
    offset = data.draw(st.one_of(st.integers(-1, 4), garbage()))
    fmt = data.draw(st.one_of(st.just(2), garbage()))
    storage = data.draw(st.one_of(st.none(), st.just(dims), st.lists(st.integers(0, 40), max_size=2), garbage()))
    addr = pick(data, ptrs)
    bad = not (isinstance(addr, int) and isinstance(offset, int) and _eq(fmt, 2))
    t = c_call(s, "aclCreateTensor", lambda: r.aclCreateTensor(dims, dtype, stride, offset, fmt, storage, addr),
               ACL_CODES, garbage_args=bad, tensor_result=True)
    if t is not None:
        nbytes = int(math.prod(t.storage_shape)) * t.dtype.itemsize
        s.tensors.append(Handle(t, owner, s.gen[owner], s.alloc_of(owner, t.addr), nbytes))


def act_destroy_tensor(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    h = pick(data, s.tensors)
    bad = not isinstance(h, Handle)
    obj = h.obj if not bad else h
    ok_expected = not bad and h.owner == owner and not h.destroyed
    ret = c_call(s, "aclDestroyTensor", lambda: s.runtime(owner).aclDestroyTensor(obj), ACL_CODES,
                 garbage_args=bad, must_fail=not ok_expected)
    if ret == 0:
        h.destroyed = True


def act_stream(s: Session, data: Any) -> None:
    owner = data.draw(st.sampled_from(("rt", "other")))
    r = s.runtime(owner)
    what = data.draw(st.sampled_from(("create", "destroy", "sync", "sync")))
    if what == "create":
        st_, ret = c_call(s, "aclrtCreateStream", r.aclrtCreateStream, ACL_CODES, garbage_args=False)
        if ret == 0:
            s.streams.append(Handle(st_, owner, s.gen[owner]))
        return
    h = pick(data, s.streams)
    bad = not isinstance(h, Handle)
    obj = h.obj if not bad else h
    valid = not bad and s.valid_stream(h, owner)
    if what == "destroy":
        ret = c_call(s, "aclrtDestroyStream", lambda: r.aclrtDestroyStream(obj), ACL_CODES, garbage_args=bad,
                     must_fail=not valid)
        if ret == 0:
            h.destroyed = True
        return
    pending = list(s.pending[owner]) if valid else []
    # streams share the device's clock: a sync may finish other streams' work too, so every
    # output launched on this device so far may change (the list is cleared with the device)
    c_call(s, "aclrtSynchronizeStream", lambda: r.aclrtSynchronizeStream(obj), ACL_CODES, garbage_args=bad,
           must_fail=not valid, outputs=lambda _: pending)


def _tensor_arg(s: Session, data: Any, int_ok: bool = False) -> Any:
    items = [h for h in s.tensors if int_ok or h.obj.dtype.name != "int32"]
    return data.draw(st.one_of(st.sampled_from(items), st.none(), garbage()))


def act_aclnn(s: Session, data: Any) -> None:
    """GetWorkspaceSize of MSE / BCE / embedding with tensors valid, stale, foreign or garbage."""
    op = data.draw(st.sampled_from(("mse", "bce", "emb")))
    red = data.draw(st.one_of(st.integers(-1, 3), st.sampled_from(("mean", "none")), garbage()))
    owner = data.draw(st.sampled_from(("rt", "other")))
    fresh = [h for h in s.tensors if s.valid_tensor(h, owner) and h.obj.dtype.name == "fp32"
             and h.obj.view_shape == tuple(SHAPE)]
    if op != "emb" and len(fresh) >= 5 and data.draw(st.booleans()):    # a valid call
        red = data.draw(st.integers(0, 2))
        picks = [data.draw(st.sampled_from(fresh)) for _ in range(5)]
        args = picks[:4] if op == "mse" else picks
        objs = [a.obj for a in args]
        if op == "mse":
            fn = lambda: aclnn.aclnnMseLossBackwardGetWorkspaceSize(objs[0], objs[1], objs[2], red, objs[3])
        else:
            fn = lambda: aclnn.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(*objs[:4], red, objs[4])
        ws, ex, ret = c_call(s, "aclnn*GetWorkspaceSize", fn, ACLNN_CODES, garbage_args=False)
        if ret == 0:
            s.executors.append(ExecEntry(ex, owner, s.gen[owner], [args[-1]] + args))
        return
    if op == "emb":
        args = [_tensor_arg(s, data), _tensor_arg(s, data, int_ok=True), None]
        nw = data.draw(st.one_of(st.integers(-1, 9), garbage()))
        pad = data.draw(st.one_of(st.integers(-2, 9), garbage()))
        freq = data.draw(st.one_of(st.booleans(), garbage()))
        args[2] = _tensor_arg(s, data)
        objs = [a.obj if isinstance(a, Handle) else a for a in args]
        fn = lambda: aclnn.aclnnEmbeddingDenseBackwardGetWorkspaceSize(objs[0], objs[1], nw, pad, freq, objs[2])
        out_idx = (2,)
    else:
        n = 4 if op == "mse" else 5
        args = [_tensor_arg(s, data) for _ in range(n)]
        objs = [a.obj if isinstance(a, Handle) else a for a in args]
        if op == "mse":
            fn = lambda: aclnn.aclnnMseLossBackwardGetWorkspaceSize(objs[0], objs[1], objs[2], red, objs[3])
        else:
            fn = lambda: aclnn.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(objs[0], objs[1], objs[2], objs[3],
                                                                                red, objs[4])
        out_idx = (n - 1,)
    handles = [a for a in args if isinstance(a, Handle)]
    bad = any(not isinstance(a, (Handle, type(None))) for a in args)
    owner = handles[0].owner if handles else "rt"
    stale = any(not s.valid_tensor(h, owner) for h in handles)
    ws, ex, ret = c_call(s, "aclnn*GetWorkspaceSize", fn, ACLNN_CODES, garbage_args=bad, must_fail=stale)
    if ret == 0:
        s.executors.append(ExecEntry(ex, owner, s.gen[owner],
                                     [args[i] for i in out_idx if isinstance(args[i], Handle)] + handles))


def act_execute(s: Session, data: Any) -> None:
    ready = [e for e in s.executors if not e.executor.used and e.gen == s.gen[e.owner] and s.live[e.owner]]
    valid = bool(ready) and data.draw(st.booleans())     # an unused executor on its own stream
    entry = data.draw(st.sampled_from(ready)) if valid else pick(data, s.executors)
    bad = not isinstance(entry, ExecEntry)
    ex = entry.executor if not bad else entry
    own = [h for h in s.streams if not bad and s.valid_stream(h, entry.owner)]
    h = data.draw(st.sampled_from(own)) if own and (valid or data.draw(st.booleans())) else pick(data, s.streams)
    stream = h.obj if isinstance(h, Handle) else h
    owner = entry.owner if not bad else "rt"
    ws_size = ex.workspace_size if not bad and ex is not None else 0
    ws = 0
    if ws_size:
        ptr, ret = s.runtime(owner).aclrtMalloc(ws_size)
        if ret == 0:
            s.serial += 1
            s.allocs[s.serial] = (ptr, ws_size, owner)
            ws = ptr
    wsz = ws_size if valid else data.draw(st.one_of(st.just(ws_size), garbage()))
    must_fail = bad or not isinstance(h, Handle) or not s.valid_stream(h, owner) or \
        entry.gen != s.gen[owner] or not s.live[owner] or \
        any(not s.valid_tensor(t, owner, destroyed_ok=True) for t in entry.tensors)
    outs = [] if bad else [(owner, t.obj.addr, t.nbytes) for t in entry.tensors[:1]] + \
        ([(owner, ws, ws_size)] if ws else [])
    ret = c_call(s, "aclnn* (execute)", lambda: aclnn.aclnnMseLossBackward(ws, wsz, ex, stream), ACLNN_CODES,
                 garbage_args=bad or not isinstance(h, Handle), must_fail=must_fail)
    if ret == 0:
        s.pending[owner] += outs



def act_lifecycle(s: Session, data: Any) -> None:
    """aclFinalize + aclInit, aclrtResetDevice, aclrtSetDevice, options: with valid or garbage ids."""
    owner = data.draw(st.sampled_from(("rt", "other")))
    r = s.runtime(owner)
    what = data.draw(st.sampled_from(("finalize", "init", "reset", "set", "opt", "msg")))
    arg = data.draw(st.one_of(st.just(0), garbage()))
    if what == "finalize":
        ret = c_call(s, "aclFinalize", r.aclFinalize, ACL_CODES, garbage_args=False)
        if ret == 0:
            s.live[owner] = False
            s.pending[owner] = []
            s.allocs = {k: v for k, v in s.allocs.items() if v[2] != owner}
    elif what == "init":
        c_call(s, "aclInit", r.aclInit, ACL_CODES, garbage_args=False)
    elif what == "reset":
        ret = c_call(s, "aclrtResetDevice", lambda: r.aclrtResetDevice(arg), ACL_CODES,
                     garbage_args=not (isinstance(arg, int) and arg == 0))
        if ret == 0:
            s.live[owner] = False
            s.pending[owner] = []
            s.allocs = {k: v for k, v in s.allocs.items() if v[2] != owner}
    elif what == "set":
        was_live = r.device is not None
        ret = c_call(s, "aclrtSetDevice", lambda: r.aclrtSetDevice(arg), ACL_CODES,
                     garbage_args=not (isinstance(arg, int) and arg == 0))
        if ret == 0 and not was_live:
            s.gen[owner] += 1
            s.live[owner] = True
            stage(s, owner)
    elif what == "opt":
        val = data.draw(st.one_of(st.integers(0, 1), garbage()))
        c_call(s, "aclrtCtxSetSysParamOpt", lambda: r.aclrtCtxSetSysParamOpt(arg, val), ACL_CODES,
               garbage_args=True)
    else:
        msg = r.aclGetRecentErrMsg()
        assert isinstance(msg, str)


def listed_stale_after_finalize(s: Session, data: Any) -> None:
    """The issue's reproducer: tensors made before aclFinalize, a new aclInit, a new owner of the
    memory; the old tensors must be refused and the new owner's bytes stay as they are."""
    r = s.rt
    old = [h for h in s.tensors if h.owner == "rt" and h.obj.dtype.name == "fp32"][:4]
    if len(old) < 4:
        return
    for call in (r.aclFinalize, r.aclInit, lambda: r.aclrtSetDevice(0)):
        c_call(s, "lifecycle", call, ACL_CODES, garbage_args=False)
    s.gen["rt"] += 1
    s.live["rt"] = True
    s.pending["rt"] = []
    s.allocs = {k: v for k, v in s.allocs.items() if v[2] != "rt"}
    ptr, _ = r.aclrtMalloc(BUF)
    s.serial += 1
    s.allocs[s.serial] = (ptr, BUF, "rt")
    r.aclrtMemcpy(ptr, BUF, np.full(BUF // 4, 103.0, np.float32), BUF, 1)
    c_call(s, "aclnnMseLossBackwardGetWorkspaceSize (stale)",
           lambda: aclnn.aclnnMseLossBackwardGetWorkspaceSize(old[0].obj, old[1].obj, old[2].obj, 0, old[3].obj),
           ACLNN_CODES, garbage_args=False, must_fail=True)
    stage(s, "rt")


def listed_cross_runtime(s: Session, data: Any) -> None:
    """An executor of one runtime run on the other runtime's stream must be refused and leave
    the other runtime working."""
    mine = [h for h in s.tensors if h.owner == "rt" and s.valid_tensor(h, "rt") and h.obj.dtype.name == "fp32"]
    theirs = [h for h in s.streams if h.owner == "other" and s.valid_stream(h, "other")]
    if len(mine) < 4 or not theirs:
        return
    ws, ex, ret = aclnn.aclnnMseLossBackwardGetWorkspaceSize(*(h.obj for h in mine[:3]), 1, mine[3].obj)
    if ret != 0:
        return
    c_call(s, "aclnnMseLossBackward (foreign stream)", lambda: aclnn.aclnnMseLossBackward(0, ws, ex, theirs[0].obj),
           ACLNN_CODES, garbage_args=False, must_fail=True)
    assert s.other.device is None or s.other.device.faulted is None


def listed_reset_clears_fault(s: Session, data: Any) -> None:
    """A kernel that faults (an out tensor whose view runs past its allocation), then
    aclrtResetDevice: the next device must work (synchronize returns 0)."""
    r = s.rt
    if not s.live["rt"]:
        return
    ptr, _ = r.aclrtMalloc(64)
    big = [64, 64]
    t = [r.aclCreateTensor(big, acl.ACL_FLOAT, None, 0, 2, big, ptr) for _ in range(4)]
    stream, _ = r.aclrtCreateStream()
    ws, ex, ret = aclnn.aclnnMseLossBackwardGetWorkspaceSize(*t[:3], 1, t[3])
    if ret == 0 and aclnn.aclnnMseLossBackward(0, ws, ex, stream) == 0:
        assert r.aclrtSynchronizeStream(stream) == acl.ACL_ERROR_RT_AICORE_EXCEPTION
    c_call(s, "aclrtResetDevice", lambda: r.aclrtResetDevice(0), ACL_CODES, garbage_args=False)
    c_call(s, "aclrtSetDevice", lambda: r.aclrtSetDevice(0), ACL_CODES, garbage_args=False)
    s.gen["rt"] += 1
    s.live["rt"] = True
    s.pending["rt"] = []
    s.allocs = {k: v for k, v in s.allocs.items() if v[2] != "rt"}
    fresh, _ = r.aclrtCreateStream()
    s.streams.append(Handle(fresh, "rt", s.gen["rt"]))
    stage(s, "rt")
    COUNTS["c.listed_cases"] += 1
    if r.aclrtSynchronizeStream(fresh) != 0:
        record("c.false_successes", "aclrtResetDevice kept the fault")
        raise AssertionError("aclrtResetDevice did not clear the device fault")


ACTIONS = (act_malloc, act_free) + (act_memcpy,) * 3 + (act_create_tensor, act_destroy_tensor) + \
    (act_stream,) * 3 + (act_aclnn,) * 4 + (act_execute,) * 4 + \
    (act_lifecycle, listed_stale_after_finalize, listed_cross_runtime, listed_reset_clears_fault)


def _session(data: Any, steps: int) -> None:
    s = setup(data.draw(st.integers(0, 3)))
    for _ in range(steps):
        data.draw(st.sampled_from(ACTIONS))(s, data)


@given(st.data())
@fuzz_settings(10)
def test_acl_calls_return_documented_codes_and_touch_nothing_else_quick(data):
    _session(data, 15)


@pytest.mark.slow
@given(st.data())
@fuzz_settings(420)
def test_acl_calls_return_documented_codes_and_touch_nothing_else_ci(data):
    _session(data, 25)
