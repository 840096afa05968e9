"""The sanitizer against the bugs Ascend C kernel authors make (tests/asc/sanitizer_catalogue.py):
each bug is reported with its kind, the kernel line, the core and the bytes, with a message
that says what to change; its fixed twin runs clean; a launch that faults leaves the host
arrays as they were; and the report of a run is the same every time."""
from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest

from opsim.simulator.errors import DeadlockError, MemoryFault, QueueError, SimulatorError, CapacityError

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import sanitizer_catalogue as cat  # noqa: E402

SOURCE = pathlib.Path(cat.__file__).read_text().splitlines()
N, BLOCKS = 2048, 2

# name -> (check, kind, the exception the launch raises or None, words the message must carry)
CATALOGUE = {
    # memory
    "gm_read_oob": ("memcheck", "out-of-bounds", None, "past the end of kernel argument 'y'"),
    "gm_write_oob": ("memcheck", "out-of-bounds", MemoryFault, "past the end of allocation 'z'"),
    "gm_view_overrun": ("memcheck", "out-of-bounds", None, "set_global_buffer"),
    "ub_overflow": ("memcheck", "out-of-bounds", MemoryFault, "overruns the local buffer of 256"),
    # refused where the tensor is made (TBuf.get checks its length against the buffer)
    "tbuf_overrun": ("memcheck", "out-of-bounds", MemoryFault, "TBuf.get of 512 x fp32 at byte offset 0: "
                     "the buffer holds 1024 B"),
    "ub_misaligned": ("memcheck", "misaligned", MemoryFault, "32 B aligned"),
    "copy_not_whole_blocks": ("memcheck", "misaligned", MemoryFault, "use DataCopyPad"),
    "uninitialized_read": ("memcheck", "uninitialized-read", None, "nothing wrote"),
    "ub_oversubscribed": ("memcheck", "over-capacity", CapacityError, "cannot allocate"),
    # races
    "missing_mte2_v": ("racecheck", "race", None, "no flag, barrier or queue hand-off"),
    "missing_v_mte3": ("racecheck", "race", None, "no flag, barrier or queue hand-off"),
    "missing_v_mte2": ("racecheck", "race", None, "no flag, barrier or queue hand-off"),
    "core_overlap": ("racecheck", "race", None, "cores core0.veccore"),
    "core_handoff": ("racecheck", "race", None, "cores core0.veccore"),
    "atomic_mixed": ("racecheck", "race", None, "write and MTE3 atomic add"),
    # synchronisation
    "set_without_wait": ("synccheck", "flag-left-set", None, "still set when the block ended"),
    "wait_without_set": ("synccheck", "deadlock", DeadlockError, "that nothing left to run will issue"),
    "reversed_event": ("synccheck", "deadlock", DeadlockError, "the two pipes of the HardEvent swapped"),
    "loop_reverse_sync": ("synccheck", "deadlock", DeadlockError, "is blocked itself"),
    "loop_tail_wait": ("synccheck", "flag-left-set", None, "still set when the block ended"),
    "cross_core_wait_unset": ("synccheck", "deadlock", DeadlockError, "no core left running sets it"),
    # TQue misuse
    "tque_alloc_over": ("memcheck", "queue-misuse", QueueError, "free_tensor one first"),
    "tque_double_free": ("memcheck", "queue-misuse", QueueError, "a double free"),
    "tque_deque_empty": ("memcheck", "queue-misuse", QueueError, "enque a tensor before each deque"),
    "tque_never_freed": ("memcheck", "buffer-not-freed", None, "never freed"),
    "tque_use_after_free": ("memcheck", "use-after-free", None, "free the tensor after its last use"),
    "tque_no_deque": ("racecheck", "race", None, "no flag, barrier or queue hand-off"),
    "tque_write_after_enque": ("racecheck", "race", None, "no flag, barrier or queue hand-off"),
}


def _marked_line(kernel: str, marker: str) -> int | None:
    """The line number of ``marker`` in the body of ``kernel`` (None if it has none)."""
    start = next(i for i, ln in enumerate(SOURCE) if ln.startswith(f"def {kernel}("))
    for i in range(start + 1, len(SOURCE)):
        if SOURCE[i].startswith(("def ", "@asc.jit")):
            return None
        if f"# {marker}" in SOURCE[i]:
            return i + 1
    return None


def _operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    return x, y, np.zeros(N, np.float32)


def _run(kernel: str, operands=None):
    """(report, exception or None) of a sanitized launch of ``kernel``."""
    x, y, z = operands if operands is not None else _operands()
    try:
        res = getattr(cat, kernel)[BLOCKS, None](x, y, z, N // BLOCKS, sanitize=True)
    except SimulatorError as exc:
        assert exc.sanitizer is not None, f"{kernel}: the fault carries no sanitizer report"
        return exc.sanitizer, exc
    return res.sanitizer, None


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_bug_is_reported_with_its_line_core_and_a_message_saying_what_to_change(name: str) -> None:
    check, kind, raises, words = CATALOGUE[name]
    report, exc = _run(f"{name}_bug")
    if raises is None:
        assert exc is None, f"{name}: {exc}"
    else:
        assert isinstance(exc, raises), f"{name}: {exc!r}"
    hits = [f for f in report.findings if f.check == check and f.kind == kind]
    assert hits, f"{name}: no {check} {kind} in\n{report}"
    line = _marked_line(f"{name}_bug", "SEEN") or _marked_line(f"{name}_bug", "BUG")
    where = re.compile(rf"sanitizer_catalogue\.py:{line}\b")
    finding = next((f for f in hits if where.search(str(f)) and words in f.message), None)
    assert finding is not None, f"{name}: no {kind} names line {line} and says {words!r}:\n{report}"
    if kind == "deadlock":
        assert all("core0.veccore" in p for p in finding.pipes), finding.pipes   # core.pipe of each wait
    else:
        assert finding.core and "core0.veccore" in finding.core, finding
    assert finding.pipes and finding.lines, finding
    if check in ("memcheck", "racecheck") and kind not in ("queue-misuse", "over-capacity"):
        assert finding.address is not None, finding   # (a failed allocation has no address)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_fixed_twin_is_clean(name: str) -> None:
    assert _marked_line(f"{name}_fixed", "FIX") is not None      # the twin says what it fixed
    report, exc = _run(f"{name}_fixed")
    assert exc is None, f"{name}_fixed: {exc}"
    assert report.ok, f"{name}_fixed:\n{report}"


FAULTING = sorted(n for n, (_, _, raises, _) in CATALOGUE.items() if raises is not None)


@pytest.mark.parametrize("name", FAULTING)
def test_a_launch_that_faults_leaves_every_host_array_as_it_was(name: str) -> None:
    x, y, z = _operands()
    z[:] = 7.0
    before = [a.tobytes() for a in (x, y, z)]
    report, exc = _run(f"{name}_bug", (x, y, z))
    assert exc is not None
    assert [a.tobytes() for a in (x, y, z)] == before


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_report_is_the_same_every_time(name: str) -> None:
    first, _ = _run(f"{name}_bug")
    second, _ = _run(f"{name}_bug")
    assert first == second and str(first) == str(second)


def test_the_fixed_twins_compute_what_they_should() -> None:
    # goldens of numpy, independent of the simulator: z = x + y tile by tile, z = 2 x, copies
    def launch(kernel: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, y, z = _operands()
        getattr(cat, kernel)[BLOCKS, None](x, y, z, N // BLOCKS)
        return x, y, z
    x, y, z = launch("missing_mte2_v_fixed")
    assert np.array_equal(z, x + y)
    x, y, z = launch("missing_v_mte2_fixed")
    assert np.array_equal(z, x + y)
    x, y, z = launch("core_overlap_fixed")
    assert np.array_equal(z, x)
    x, y, z = launch("gm_view_overrun_fixed")
    assert np.array_equal(z, x)
    x, y, z = launch("tque_use_after_free_fixed")
    b = N // BLOCKS
    for blk in range(BLOCKS):
        part = slice(blk * b, blk * b + cat.TILE)
        assert np.array_equal(z[part], 2 * x[part])
    x, y, z = launch("core_handoff_fixed")
    for blk in range(BLOCKS):
        nxt = (blk + 1) % BLOCKS
        assert np.array_equal(z[blk * b: blk * b + cat.TILE], 2 * x[nxt * b: nxt * b + cat.TILE])
    x, y, z = launch("atomic_mixed_fixed")
    expect = np.zeros(cat.TILE, np.float32)
    for blk in range(BLOCKS):                      # block order of the adds: exact for two blocks
        expect = expect + x[blk * b: blk * b + cat.TILE]
    assert np.array_equal(z[:cat.TILE], expect)


def test_a_use_after_free_names_the_free_and_the_use() -> None:
    report, _ = _run("tque_use_after_free_bug")
    (uaf,) = report.findings
    use = _marked_line("tque_use_after_free_bug", "BUG")
    assert [ln.rsplit(":", 1)[1] for ln in uaf.lines] == [str(use), str(use - 1)]
    assert uaf.pipes == ("VECTOR", "VECTOR") and "TQue(VECIN) buffer 0" in uaf.message
    assert uaf.ranges == ("core0.veccore0/UB [0x0, 0x400) read",)


def test_reusing_a_queue_buffer_after_alloc_tensor_is_no_use_after_free(example) -> None:
    # the double-buffered add frees and re-allocates every buffer once per tile
    res = example("add_tque").run(8 * 4096, 8, 2, sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)


NOT_DEADLOCKS = sorted(n for n in FAULTING if CATALOGUE[n][1] != "deadlock")


@pytest.mark.parametrize("name", NOT_DEADLOCKS)
def test_a_fault_names_its_kernel_line_once_in_the_report_and_once_in_the_exception(name: str) -> None:
    # the launch used to put "(kernel line L)" (or the front-end's "(at L)") into the fault's
    # reason before the report was made, so the finding printed L in its message and again in
    # its instruction row, and the traceback (exception text, then the report as a note) 3 times
    report, exc = _run(f"{name}_bug")
    line = _marked_line(f"{name}_bug", "SEEN") or _marked_line(f"{name}_bug", "BUG")
    at = re.compile(rf"sanitizer_catalogue\.py:{line}\b")
    (fault,) = [f for f in report.findings if f.message.endswith("(the run fails here)")]
    assert len(at.findall(str(fault))) == 1, str(fault)
    assert len(at.findall(str(exc))) == 1, str(exc)
    assert at.search(fault.lines[0]) and str(exc).count(fault.lines[0]) == 1   # the same line in both


KERNEL_CODE_FAULTS = sorted(n for n in FAULTING if CATALOGUE[n][2] in (QueueError, CapacityError)
                            or n in ("tbuf_overrun", "ub_misaligned"))


@pytest.mark.parametrize("name", KERNEL_CODE_FAULTS)
def test_a_fault_of_the_kernels_own_code_names_the_call_that_raised_it(name: str) -> None:
    # raised by an API call of the kernel (no pipe ran an instruction): the finding used to
    # print "-  -" for pipe and instruction
    report, exc = _run(f"{name}_bug")
    (fault,) = report.findings
    line = _marked_line(f"{name}_bug", "SEEN") or _marked_line(f"{name}_bug", "BUG")
    call = SOURCE[line - 1].split("#")[0]
    assert fault.pipes == ("SCALAR",) and fault.instructions[0] != "-", fault
    method = fault.instructions[0].rpartition(".")[2]          # e.g. "TQue.free_tensor"
    assert method and method in call, (fault.instructions, call)
    assert re.search(rf"SCALAR +{re.escape(fault.instructions[0])}  at \S*sanitizer_catalogue\.py:{line}$",
                     str(fault), re.M), str(fault)


def test_a_buffer_never_freed_names_the_alloc_tensor_line_in_lines_and_in_the_report() -> None:
    report, _ = _run("tque_never_freed_bug")
    (unfreed,) = report.findings
    line = _marked_line("tque_never_freed_bug", "BUG")
    assert "alloc_tensor" in SOURCE[line - 1]
    assert len(unfreed.lines) == 1 and unfreed.lines[0].endswith(f"sanitizer_catalogue.py:{line}")
    assert unfreed.instructions == ("TQue.alloc_tensor",) and unfreed.pipes == ("SCALAR",)
    text = str(unfreed)
    assert len(re.findall(rf"sanitizer_catalogue\.py:{line}\b", text)) == 1, text
    assert re.search(rf"^ +SCALAR +TQue\.alloc_tensor  at \S*sanitizer_catalogue\.py:{line}$", text, re.M)
    assert unfreed.ranges == ("core0.veccore0/UB [0x0, 0x400)",)


def test_every_finding_of_the_catalogue_names_a_kernel_line() -> None:
    for name in sorted(CATALOGUE):
        report, _ = _run(f"{name}_bug")
        for f in report.findings:
            assert f.lines and all(f.lines), f"{name}: {f}"
            assert len(f.pipes) == len(f.instructions) == len(f.lines), f"{name}: {f}"
