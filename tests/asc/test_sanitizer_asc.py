"""The sanitizer on pyasc-style kernels (examples/kernels/sanitizer_bugs.py): a missing wait_flag,
a wrong event id and an out-of-bounds data_copy, with and without ``sanitize=True``."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from opsim import cli
from opsim.kernels import registry
from opsim.simulator.errors import DeadlockError, MemoryFault

BUGS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kernels" / "sanitizer_bugs.py"
N, BLOCKS = 16384, 8


@pytest.fixture(scope="module")
def bugs():
    # the file registers four operators: gone after this module, so other tests see the built-ins
    registry.names()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_OPS", dict(registry._OPS))
        mp.setattr(registry, "_FILES", dict(registry._FILES))
        yield registry.load_file(str(BUGS))


def _line(text: str) -> str:
    """"sanitizer_bugs.py:<line>" of the first line containing ``text``."""
    for i, line in enumerate(BUGS.read_text().splitlines(), 1):
        if text in line:
            return f"sanitizer_bugs.py:{i}"
    raise AssertionError(text)


def _operands():
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    return x, y, np.zeros(N, np.float32)


def _in_kernel(fn_name: str, text: str) -> str:
    """"sanitizer_bugs.py:<line>" of ``text`` inside the kernel ``fn_name``."""
    lines = BUGS.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {fn_name}("))
    for i in range(start, len(lines)):
        if text in lines[i]:
            return f"sanitizer_bugs.py:{i + 1}"
    raise AssertionError(text)


def test_the_correct_add_is_clean_and_bitwise(bugs) -> None:
    x, y, z = _operands()
    res = bugs.add[BLOCKS, None](x, y, z, N // BLOCKS, sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)
    assert np.array_equal(z, x + y)


def test_a_removed_wait_flag_is_a_race_naming_both_source_lines(bugs) -> None:
    x, y, z = _operands()
    res = bugs.add_missing_wait[BLOCKS, None](x, y, z, N // BLOCKS, sanitize=True)
    races = res.sanitizer.by_check("racecheck")
    load = _in_kernel("add_missing_wait", "asc.data_copy(x_ub, xg[i * TILE:], TILE)")
    add = _in_kernel("add_missing_wait", "asc.add(z_ub, x_ub, y_ub, TILE)")
    race = next(f for f in races if any(ln.endswith(load) for ln in f.lines))
    assert {ln.rsplit("/", 1)[-1] for ln in race.lines} == {load, add}
    assert set(race.pipes) == {"MTE2", "VECTOR"}
    assert race.ranges and all("/UB [0x" in r for r in race.ranges)
    assert load in str(res.sanitizer) and add in str(res.sanitizer)


def test_without_sanitize_the_race_is_visible_in_the_trace(bugs) -> None:
    x, y, z = _operands()
    res = bugs.add_missing_wait[BLOCKS, None](x, y, z, N // BLOCKS)
    assert res.sanitizer is None
    loads = [(s.start, s.end) for s in res.trace.slices("core0.veccore0", "MTE2")]
    adds = [(s.start, s.end) for s in res.trace.slices("core0.veccore0", "VECTOR")]
    assert any(a0 < l1 and l0 < a1 for a0, a1 in adds for l0, l1 in loads)      # overlapping slices
    assert not np.array_equal(z, x + y)                                          # and wrong bits


def test_a_wrong_event_id_is_a_deadlock_report_naming_the_blocked_pipes(bugs) -> None:
    x, y, z = _operands()
    with pytest.raises(DeadlockError) as e:
        bugs.add_wrong_event[BLOCKS, None](x, y, z, N // BLOCKS, sanitize=True)
    report = e.value.sanitizer
    (dead,) = report.findings
    assert dead.kind == "deadlock"
    assert dead.pipes[0].startswith("core0.veccore0.VECTOR") and dead.instructions[0] == "WaitFlag<MTE2_VECTOR>(1)"
    assert dead.lines[0].endswith(_in_kernel("add_wrong_event", "asc.wait_flag(asc.HardEvent.MTE2_V, 1)"))
    assert {p.split(" ")[0].rsplit(".", 1)[1] for p in dead.pipes} == {"VECTOR", "MTE2", "MTE3"}
    assert "wrong event id" in dead.message and f"{BLOCKS} cores" in dead.message
    # the engine stops as soon as nothing can move: a few instructions per core
    assert report.instructions <= 8 * BLOCKS


def test_without_sanitize_a_wrong_event_id_still_fails_loudly(bugs) -> None:
    x, y, z = _operands()
    with pytest.raises(DeadlockError, match=r"WaitFlag<MTE2_VECTOR>\(1\)"):
        bugs.add_wrong_event[BLOCKS, None](x, y, z, N // BLOCKS)


def test_an_out_of_bounds_data_copy_names_the_line_and_the_address(bugs) -> None:
    x, y, z = _operands()
    with pytest.raises(MemoryFault) as e:
        bugs.add_out_of_bounds[BLOCKS, None](x, y, z, N // BLOCKS, sanitize=True)
    (oob,) = e.value.sanitizer.findings
    assert oob.check == "memcheck" and oob.kind == "out-of-bounds"
    assert oob.lines[0].endswith(_in_kernel("add_out_of_bounds", "asc.data_copy(zg[(i + 1) * TILE:], z_ub, TILE)"))
    assert oob.address == e.value.address and oob.address is not None
    assert f"{oob.address:#x}" in str(e.value.sanitizer)


def test_without_sanitize_the_out_of_bounds_copy_faults(bugs) -> None:
    x, y, z = _operands()
    with pytest.raises(MemoryFault, match="out of bounds|unallocated"):
        bugs.add_out_of_bounds[BLOCKS, None](x, y, z, N // BLOCKS)


@pytest.mark.parametrize("kernel,status,expect", [
    ("add", 0, "clean"),
    ("add_missing_wait", 1, "racecheck: race"),
    ("add_wrong_event", 1, "synccheck: deadlock"),
    ("add_out_of_bounds", 1, "memcheck: out-of-bounds"),
])
def test_opsim_check_prints_the_findings_and_sets_the_exit_status(kernel, status, expect, capsys, bugs) -> None:
    assert cli.main(["check", f"{BUGS}:{kernel}", "--shape", str(N), "--dtype", "fp32"]) == status
    assert expect in capsys.readouterr().out


def test_opsim_check_runs_a_plain_jit_kernel_with_its_scalar_arguments(capsys, bugs) -> None:
    target = f"{BUGS.parent / 'add_manual_flags.py'}:add_kernel"
    args = ["check", target, "--shape", str(N), "--block-dim", "8", "--arg", f"block_length={N // 8}"]
    assert cli.main(args + ["--arg", "buffer_num=2"]) == 0
    assert "clean" in capsys.readouterr().out
    assert cli.main(args) == 2                       # buffer_num missing: named in the message
    assert "--arg buffer_num=VALUE" in capsys.readouterr().err


def test_opsim_check_refuses_an_arg_the_kernel_does_not_take(capsys, bugs) -> None:
    # a misspelt --arg was ignored: the check ran the kernel without the value the user meant
    target = f"{BUGS.parent / 'add_manual_flags.py'}:add_kernel"
    args = ["check", target, "--shape", str(N), "--block-dim", "8", "--arg", f"block_length={N // 8}",
            "--arg", "buffer_num=2", "--arg", "bufer_num=1"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "--arg bufer_num" in err and "did you mean 'buffer_num'" in err and "block_length, buffer_num" in err


def test_opsim_check_of_an_empty_call_is_clean_not_a_traceback(capsys, bugs) -> None:
    # an empty tensor launches nothing: the report is empty, not None (was AttributeError)
    assert cli.main(["check", f"{BUGS}:add", "--shape", "0", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "no findings" in out and "over 0 instructions" in out and "clean" in out


@pytest.mark.parametrize("name", ["add_manual_flags", "add_tque", "matmul_leaky_relu"])
def test_sanitize_changes_neither_bits_nor_cycles_of_the_examples(name, example, monkeypatch) -> None:
    import importlib
    jit = importlib.import_module("opsim.asc.jit")
    results = {}
    for sanitize in (False, True):
        seen = []
        original = jit.launch

        def launch(*args, _orig=original, _seen=seen, _s=sanitize, **kw):
            kw.setdefault("sanitize", _s)
            res = _orig(*args, **kw)
            _seen.append(res)
            return res
        monkeypatch.setattr(jit, "launch", launch)
        example(name).main()
        monkeypatch.setattr(jit, "launch", original)
        results[sanitize] = seen
    assert len(results[True]) == len(results[False]) > 0
    for plain, checked in zip(results[False], results[True]):
        assert checked.sanitizer is not None and checked.sanitizer.ok, str(checked.sanitizer)
        assert plain.sanitizer is None and plain.cycles == checked.cycles
        assert set(plain.outputs) == set(checked.outputs)
        for k in plain.outputs:
            assert plain.outputs[k].tobytes() == checked.outputs[k].tobytes()


def _fault_after_barrier_kernel():
    import opsim.asc as asc

    @asc.jit
    def load_past_the_end(x: asc.GlobalAddress, z: asc.GlobalAddress):
        xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
        xg.set_global_buffer(x)
        zg.set_global_buffer(z)
        t = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, 2048)
        asc.data_copy(t, xg[512:], 1024)                 # runs 2 KiB past the end of x: faults
        asc.pipe_barrier(asc.PipeID.PIPE_ALL)          # VECTOR and MTE3 have set their flags
        asc.data_copy(zg, t, 1024)

    return load_past_the_end


def test_a_fault_is_the_only_finding_not_the_flags_it_left_set() -> None:
    # the fault ends the run while VECTOR and MTE3 have set the barrier's flags and SCALAR has
    # not waited for them yet: the sanitizer used to add two "flag-left-set" findings for the
    # block the fault cut short
    kernel = _fault_after_barrier_kernel()
    x = np.zeros(1024, np.float32)
    with pytest.raises(MemoryFault) as err:
        kernel[1, None](x, np.zeros_like(x), sanitize=True)
    (finding,) = err.value.sanitizer.findings
    assert finding.kind == "out-of-bounds" and finding.address == err.value.address


def test_without_sanitize_a_deadlock_lists_each_blocked_pipe_once_with_its_kernel_line(bugs) -> None:
    x, y, z = _operands()
    with pytest.raises(DeadlockError) as err:
        bugs.add_wrong_event[BLOCKS, None](x, y, z, N // BLOCKS)
    text = str(err.value)
    # the list of blocked pipes used to be printed twice (in the reason and again by the error)
    assert text.count("waiting:") == 1
    assert "core0.veccore0.VECTOR: WaitFlag<MTE2_VECTOR>(1) at " in text
    assert _line("asc.wait_flag(asc.HardEvent.MTE2_V, 1)") in text
    # 8 cores x 3 blocked pipes: the message names 8 of them, the attribute keeps all
    assert len(err.value.waiting) == 3 * BLOCKS and text.endswith(f"and {3 * BLOCKS - 8} more")


@pytest.mark.parametrize("extra,named,instead", [
    (["--arg", "tile=64"], "--arg", "--attr KEY=VALUE"),
    (["--block-dim", "4"], "--block-dim", "--tiling block_dim=N"),
])
def test_opsim_check_refuses_jit_options_for_a_registered_operator(extra, named, instead, capsys, bugs) -> None:
    # --arg and --block-dim were ignored for an operator: the check ran with defaults the user
    # had not asked for and said "clean"
    assert cli.main(["check", f"{BUGS}:add", "--shape", str(N), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{named} does not apply to" in err and "a registered operator" in err and instead in err


@pytest.mark.parametrize("extra,named,instead", [
    (["--attr", "reduction=0"], "--attr", "--arg NAME=VALUE"),
    (["--tiling", "block_dim=8"], "--tiling", "--block-dim N"),
])
def test_opsim_check_refuses_operator_options_for_a_jit_kernel(extra, named, instead, capsys, bugs) -> None:
    target = f"{BUGS.parent / 'add_manual_flags.py'}:add_kernel"
    args = ["check", target, "--shape", str(N), "--arg", f"block_length={N}", "--arg", "buffer_num=2"]
    assert cli.main(args + extra) == 2
    err = capsys.readouterr().err
    assert f"{named} does not apply to" in err and "an @asc.jit kernel" in err and instead in err
    assert cli.main(args) == 0                       # the same call without it runs (block_dim 1)
