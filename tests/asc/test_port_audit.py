"""Findings of porting pyasc-style kernels to opsim.asc (seventeenth session): the cast call's
round mode, the refusal of a cast the device lacks, and the sanitizer's report of a queue
consumer that never deques, in a tile loop."""
import numpy as np
import pytest

import opsim.asc as asc
from opsim.simulator.errors import UnsupportedInstruction

N = 1024


@asc.jit
def cast_kernel(x: asc.GlobalAddress, n: int, form: str):
    a = asc.LocalTensor(asc.half, asc.TPosition.VECIN, 0, n)
    f = asc.LocalTensor(asc.float32, asc.TPosition.VECCALC, n * 2, n)
    asc.duplicate(a, 1.0, n)
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)
    if form == "count_as_round_mode":
        asc.cast(f, a, n)                                            # LINE cast
    elif form == "no_round_mode":
        asc.cast(f, a, count=n)
    elif form == "fp32_to_int8":
        b = asc.LocalTensor(asc.int8, asc.TPosition.VECOUT, n * 8, n)
        asc.cast(b, f, asc.RoundMode.CAST_RINT, n)
    elif form == "fp32_to_uint8":
        u = asc.LocalTensor(asc.uint8, asc.TPosition.VECOUT, n * 8, n)
        asc.cast(u, f, asc.RoundMode.CAST_RINT, n)


def _line(marker: str) -> int:
    import inspect
    src, first = inspect.getsourcelines(cast_kernel.fn)
    return first + next(i for i, s in enumerate(src) if f"# LINE {marker}" in s)


def test_a_count_where_pyasc_puts_the_round_mode_is_refused_naming_the_value_and_the_order() -> None:
    # pyasc: cast(dst, src, round_mode, count); a port that drops the round mode passes the
    # count in its place -- the refusal names the value, what a round mode is and the line
    with pytest.raises(TypeError) as exc:
        cast_kernel[1, None](np.zeros(8, np.float32), N, "count_as_round_mode")
    msg = str(exc.value)
    assert "round_mode" in msg and "1024" in msg and "CAST_RINT" in msg and "(dst, src, round_mode" in msg
    assert f"test_port_audit.py:{_line('cast')}" in msg


def test_cast_without_a_round_mode_is_refused_as_pyasc_does() -> None:
    # pyasc's cast has no default round mode: opsim.asc's must not invent one
    with pytest.raises(TypeError, match="round_mode"):
        cast_kernel[1, None](np.zeros(8, np.float32), N, "no_round_mode")


def test_a_cast_two_casts_reach_names_the_chain() -> None:
    # atlas-a2 prices fp32 -> fp16 and fp16 -> uint8 but not fp32 -> uint8
    with pytest.raises(UnsupportedInstruction) as exc:
        cast_kernel[1, None](np.zeros(8, np.float32), N, "fp32_to_uint8")
    msg = str(exc.value)
    assert "fp32 -> uint8" in msg and "fp32 -> fp16" in msg and "test_port_audit.py" in msg
    assert "chain two casts, fp32 -> fp16 -> uint8" in msg


def test_a_cast_to_a_dtype_the_device_never_converts_to_says_so_instead_of_suggesting_a_chain() -> None:
    # atlas-a2 has no Cast_*_int8 at all: before, the refusal listed the casts from fp32 and said
    # "chain two casts through one of those", which cannot reach int8
    with pytest.raises(UnsupportedInstruction) as exc:
        cast_kernel[1, None](np.zeros(8, np.float32), N, "fp32_to_int8")
    msg = str(exc.value)
    assert "fp32 -> int8" in msg and "test_port_audit.py" in msg
    assert "atlas-a2 has no conversion to int8 at all" in msg and "Cast_*_int8" in msg
    assert "chain" not in msg


@asc.jit
def bf16_cast_kernel(x: asc.GlobalAddress, n: int, to_bf16: bool):
    f = asc.LocalTensor(asc.float32, asc.TPosition.VECCALC, 0, n)
    b = asc.LocalTensor(asc.bfloat16, asc.TPosition.VECOUT, n * 4, n)
    asc.duplicate(f, 1.0, n)
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)
    if to_bf16:
        asc.cast(b, f, asc.RoundMode.CAST_RINT, n)
    else:
        asc.cast(f, b, asc.RoundMode.CAST_NONE, n)


# the vendor's Cast takes bf16 on Atlas A2/A3 only; its scalar bf16 casts list the training
# (Ascend 910) and inference (310P) series as unsupported (docs/sources.md#bf16-conversion).
# Before, both devices priced fp32 <-> bf16 as an assumption and ran it.
@pytest.mark.parametrize("device", ["atlas-training", "atlas-inference"])
@pytest.mark.parametrize("to_bf16", [True, False])
def test_a_bf16_cast_is_refused_on_the_series_without_bf16(device: str, to_bf16: bool) -> None:
    with pytest.raises(UnsupportedInstruction) as exc:
        bf16_cast_kernel[1, None](np.zeros(8, np.float32), N, to_bf16, device=device)
    msg = str(exc.value)
    pair = "fp32 -> bf16" if to_bf16 else "bf16 -> fp32"
    assert f"cast {pair} on {device}" in msg and f"no Cast_{pair.replace(' -> ', '_')} entry" in msg
    # the device converts nothing from (or to) bf16: the refusal says so plainly rather than
    # "from bf16 it converts to nothing: chain two casts through one of those"
    side = "to bf16" if to_bf16 else "from bf16"
    assert f"{device} has no conversion {side} at all" in msg and "chain" not in msg


def test_a_bf16_cast_runs_on_atlas_a2() -> None:
    for to_bf16 in (True, False):
        bf16_cast_kernel[1, None](np.zeros(8, np.float32), N, to_bf16, device="atlas-a2")


TILE = 256


@asc.jit
def scale_loop(x: asc.GlobalAddress, z: asc.GlobalAddress, tiles: int, bug: str):
    # a TQue-framed y = 2x, double buffered, over several tiles (tutorial 02's loop)
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x, tiles * TILE)
    zg.set_global_buffer(z, tiles * TILE)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(qx, 2, TILE * 4)
    pipe.init_buffer(qz, 2, TILE * 4)
    for i in range(tiles):
        a = qx.alloc_tensor(asc.float32)
        asc.data_copy(a, xg[i * TILE:], TILE)
        qx.enque(a)
        if bug != "no_deque":
            a = qx.deque(asc.float32)
        c = qz.alloc_tensor(asc.float32)
        if bug == "use_after_free":
            qx.free_tensor(a)
        asc.muls(c, a, 2.0, TILE)
        if bug != "use_after_free":
            qx.free_tensor(a)
        qz.enque(c)
        c = qz.deque(asc.float32)
        asc.data_copy(zg[i * TILE:], c, TILE)
        qz.free_tensor(c)


def _scale_report(bug: str):
    x = np.arange(8 * TILE, dtype=np.float32)
    z = np.zeros_like(x)
    res = scale_loop[1, None](x, z, 8, bug, sanitize=True)
    return res.sanitizer


def test_a_consumer_that_never_deques_in_a_tile_loop_is_a_race_not_a_use_after_free() -> None:
    # without the deque nothing orders the muls after the load of its tile: a race (and the
    # enque flags left set). The buffer was allocated again before the muls in the program, so
    # the free_tensor of two tiles earlier is no use after free -- it was reported as one, for
    # every buffer, naming that earlier free_tensor
    report = _scale_report("no_deque")
    kinds = {f.kind for f in report.findings}
    assert "race" in kinds and "flag-left-set" in kinds
    assert "use-after-free" not in kinds, str(report)


def test_a_use_after_free_in_a_tile_loop_is_still_reported() -> None:
    report = _scale_report("use_after_free")
    assert "use-after-free" in {f.kind for f in report.findings}, str(report)


def test_the_fixed_loop_is_clean() -> None:
    report = _scale_report("")
    assert report.ok, str(report)


@asc.jit
def fwk_kernel(x: asc.GlobalAddress, case: str):
    xg = asc.GlobalTensor()
    xg.set_global_buffer(x, 64)
    pipe = asc.TPipe()
    q = asc.TQue(asc.TPosition.VECIN, 2)
    pipe.init_buffer(q, 2, 256)
    tb = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(tb, 1024)
    if case == "get_len":
        t = tb.get(asc.float32, len=64)                      # pyasc's keyword
        asc.duplicate(t, 3.0, 64)
        e = pipe.fetch_event_id(asc.HardEvent.V_MTE3)
        asc.set_flag(asc.HardEvent.V_MTE3, e)
        asc.wait_flag(asc.HardEvent.V_MTE3, e)
        asc.data_copy(xg, t, 64)
    elif case == "offset_unaligned":
        tb.get_with_offset(8, 16, asc.float32)               # LINE offset
    elif case == "queue_state":
        assert q.has_idle_buffer() and q.get_tensor_count_in_que() == 0
        a = q.alloc_tensor(asc.float32)
        asc.duplicate(a, 1.0, 64)
        q.enque(a)
        assert q.get_tensor_count_in_que() == 1
        a = q.deque(asc.float32)
        q.free_tensor(a)
    elif case == "event_ids":
        e0 = pipe.alloc_event_id(asc.HardEvent.MTE2_V)
        e1 = pipe.alloc_event_id(asc.HardEvent.MTE2_V)
        assert e0 != e1 and pipe.fetch_event_id(asc.HardEvent.MTE2_V) not in (e0, e1)
        pipe.release_event_id(e0, asc.HardEvent.MTE2_V)
        assert pipe.alloc_event_id(asc.HardEvent.MTE2_V) == e0
    elif case == "free_all_event":
        q.free_all_event()                                  # LINE free_all_event
    elif case == "alloc_in_place":
        q.alloc_tensor(tb.get(asc.float32))                 # LINE alloc_in_place


def _fwk_line(marker: str) -> int:
    import inspect
    src, first = inspect.getsourcelines(fwk_kernel.fn)
    return first + next(i for i, s in enumerate(src) if f"# LINE {marker}" in s)


def test_tbuf_get_takes_pyasc_len_keyword_and_pipe_event_ids_work() -> None:
    x = np.zeros(64, np.float32)
    fwk_kernel[1, None](x, "get_len")
    assert np.array_equal(x, np.full(64, 3.0, np.float32))


def test_get_with_offset_refuses_an_offset_not_32_byte_aligned_at_the_call() -> None:
    # pyasc raises at the call; opsim faulted later, at the first use, naming that line
    with pytest.raises(ValueError) as exc:
        fwk_kernel[1, None](np.zeros(64, np.float32), "offset_unaligned")
    msg = str(exc.value)
    assert "buf_offset" in msg and "16" in msg and "32" in msg
    assert f"test_port_audit.py:{_fwk_line('offset')}" in msg


@pytest.mark.parametrize("case", ["queue_state", "event_ids"])
def test_queue_state_and_event_id_calls_of_pyasc(case: str) -> None:
    fwk_kernel[1, None](np.zeros(64, np.float32), case, sanitize=True)


@pytest.mark.parametrize("case,what", [("free_all_event", "TQue.free_all_event"),
                                       ("alloc_in_place", "alloc_tensor(tensor)")])
def test_unmodelled_queue_calls_are_refused_naming_the_call_and_the_line(case: str, what: str) -> None:
    with pytest.raises(UnsupportedInstruction) as exc:
        fwk_kernel[1, None](np.zeros(64, np.float32), case)
    msg = str(exc.value)
    assert what in msg and f"test_port_audit.py:{_fwk_line(case)}" in msg and "writing-kernels.md" in msg
