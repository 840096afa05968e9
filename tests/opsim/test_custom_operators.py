"""Custom operators: a user's kernel registered with opsim.register_operator runs wherever a
built-in operator does (opsim.run, opsim run --kernel, studies, the demo report)."""
from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import opsim
from opsim import cli
from opsim.demo import run_case
from opsim.kernels import registry
from opsim.simulator.isa import Muls
from opsim.simulator.tile import GlobalTensor, KernelContext, LocalTensor, elementwise_pipeline

ROOT = Path(__file__).resolve().parents[2]
BUGS = ROOT / "examples" / "kernels" / "sanitizer_bugs.py"
ADD = f"{BUGS}:add"


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Operators registered by a test (and files loaded for them) vanish after it, so other test
    modules (e.g. the demo over every operator) see only the built-in ones."""
    registry.names()                                       # the built-ins are in before the copy
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FILES", dict(registry._FILES))
    _register_scale_by()
    yield


# -- a generator-kernel operator ----------------------------------------------------------------

def _scale_tiling(spec, inputs, attrs):
    n = inputs["x"].numel
    return {"block_dim": 2 if n >= 2048 else 1, "length": n, "tile_length": 512}


def scale_by(ctx: KernelContext, x: GlobalTensor, out: GlobalTensor, length: int, tile_length: int,
             alpha: float) -> Iterator[Any]:
    per = -(-length // ctx.block_dim)
    start = ctx.block_idx * per

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        yield Muls(o, ins[0], scalar=alpha, count=n)

    yield from elementwise_pipeline(ctx, inputs=[x], output=out, start=start, length=min(per, length - start),
                                    tile_length=tile_length, buffer_num=2, compute=compute)


def _register_scale_by() -> None:
    opsim.register_operator(scale_by, inputs=("x",), outputs=("out",), tiling=_scale_tiling, attrs={"alpha": 2.0},
                            golden=lambda x, alpha: {"out": (x.astype(np.float32) * np.float32(alpha)).astype(x.dtype)},
                            dtypes=("fp32", "fp16"), example_shape=(4096,))


def test_a_registered_generator_kernel_runs_through_opsim_run_against_its_golden() -> None:
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    res = opsim.run("scale_by", x=x, alpha=3.0)
    assert np.array_equal(res.outputs["out"], x * np.float32(3.0))
    assert res.cycles > 0 and res.stats["block_dim"] == 2
    one = opsim.run("scale_by", x=x, alpha=3.0, tiling={"block_dim": 1})
    assert one.stats["block_dim"] == 1 and np.array_equal(one.outputs["out"], res.outputs["out"])
    assert one.cycles > res.cycles


def test_a_scalar_operand_is_rounded_to_each_dtype_and_keeps_the_sign_of_zero() -> None:
    x = np.abs(np.random.default_rng(1).standard_normal(1024)).astype(np.float32) + 1
    for alpha in (0.1, -0.0, 0.0, 0.1):
        for dt in (np.float16, np.float32, np.float16):
            xd = x.astype(dt)
            out = opsim.run("scale_by", x=xd, alpha=alpha, trace="off").outputs["out"]
            s = np.float32(np.asarray(alpha, np.float32).astype(dt))   # the scalar in the tensor's type
            want = (xd.astype(np.float32) * s).astype(dt)
            assert out.tobytes() == want.tobytes(), (alpha, dt)


def test_a_custom_operator_validates_its_call_like_a_builtin_one() -> None:
    x = np.zeros(64, np.int32)
    with pytest.raises(opsim.OpError, match=r"x has dtype INT32; scale_by supports FLOAT, FLOAT16") as e:
        opsim.run("scale_by", x=x)
    assert e.value.code == 161002
    with pytest.raises(opsim.OpError, match="unknown tiling override 'tile_lenght'"):
        opsim.run("scale_by", x=np.zeros(64, np.float32), tiling={"tile_lenght": 64})
    with pytest.raises(TypeError, match="unexpected argument 'beta'"):
        opsim.run("scale_by", x=np.zeros(64, np.float32), beta=1.0)


_BEYOND = "selects cores beyond the 48 vector cores of atlas-a2; allowed: 0x1..0xffffffffffff (bit i = core i)"
_ALLOWED = "allowed: 0x1..0xffffffffffff (bit i = core i of the 48 vector cores of atlas-a2)"


@pytest.mark.parametrize("mask,said", [(0, f"0x0 selects no core; {_ALLOWED}"), (-1, f"-0x1 {_BEYOND}"),
                                       (1 << 48, f"0x1000000000000 {_BEYOND}"),
                                       (1.5, f"1.5 is not an integer; {_ALLOWED}"),
                                       ("3", f"'3' is not an integer; {_ALLOWED}"),
                                       (True, f"True is not an integer; {_ALLOWED}")])
def test_a_bad_core_mask_override_is_refused_naming_it_and_the_allowed_masks(mask: Any, said: str) -> None:
    # tiling={"core_mask": 1.5} or "3" failed as a bare TypeError ("'<=' not supported between
    # instances of 'str' and 'int'"), naming neither core_mask nor what it takes; True ran on core 0
    with pytest.raises(opsim.SimulatorError) as err:
        opsim.run("scale_by", x=np.zeros(64, np.float32), tiling={"block_dim": 1, "core_mask": mask})
    msg = str(err.value)
    assert msg.endswith(f"core_mask {said}"), msg



def test_a_numpy_integer_kernel_parameter_override_runs_as_the_same_python_int() -> None:
    # the override reached the kernel and the tiling record as np.int64(256): the tiling's repr
    # and the trace's launch arguments differed from the int call's
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    want = opsim.run("scale_by", x=x, tiling={"tile_length": 256, "block_dim": 2}, trace="launch")
    got = opsim.run("scale_by", x=x, tiling={"tile_length": np.int64(256), "block_dim": np.int32(2)}, trace="launch")
    assert got.cycles == want.cycles and got.outputs["out"].tobytes() == want.outputs["out"].tobytes()
    assert repr(got.tiling) == repr(want.tiling)
    assert got.trace.to_chrome_json() == want.trace.to_chrome_json()

def test_register_operator_names_a_missing_kernel_parameter() -> None:
    def k(ctx, a):            # pragma: no cover - never launched
        yield None
    with pytest.raises(ValueError, match="the kernel has no parameter 'b'"):
        opsim.register_operator(k, inputs=("a",), outputs=("b",), tiling=lambda *a: {"block_dim": 1})


def _k_x_y(ctx, x, y):      # pragma: no cover - never launched
    yield None


@pytest.mark.parametrize("what", ["infer", "tiling"])
def test_a_host_function_of_the_wrong_signature_is_refused_naming_it(what: str) -> None:
    # infer=lambda inputs: ... failed at the first run with "TypeError: <lambda>() takes 1
    # positional argument but 3 were given", naming neither infer nor the signature it needs
    ok = {"tiling": lambda spec, inputs, attrs: {"block_dim": 1}}
    bad = {what: lambda inputs: {"y": ((64,), "fp32")}}
    with pytest.raises(TypeError, match=rf"register_operator\('k_bad'\): {what}= must be called as "
                                        rf"{what}\(spec, inputs, attrs\); <lambda>\(inputs\) does not take those 3 "
                                        rf"arguments \(too many positional arguments\)"):
        opsim.register_operator(_k_x_y, name="k_bad", inputs=("x",), outputs=("y",), **{**ok, **bad})
    with pytest.raises(TypeError, match=rf"register_operator\('k_bad'\): {what}= must be a callable "
                                        rf"{what}\(spec, inputs, attrs\); got dict"):
        opsim.register_operator(_k_x_y, name="k_bad", inputs=("x",), outputs=("y",), **{**ok, what: {}})
    assert "k_bad" not in registry.names()


def test_an_infer_result_without_an_output_is_refused_naming_infer() -> None:
    opsim.register_operator(_k_x_y, name="k_infer", inputs=("x",), outputs=("y",),
                            tiling=lambda spec, inputs, attrs: {"block_dim": 1},
                            infer=lambda spec, inputs, attrs: {"z": ((64,), "fp32")})
    with pytest.raises(TypeError, match=r"k_infer: infer= returned \{'z': \(\(64,\), 'fp32'\)\}; it must return "
                                        r"\{output: \(shape, dtype\)\} for every output \(y\)"):
        opsim.run("k_infer", x=np.zeros(64, np.float32))


def test_opsim_run_kernel_names_the_wrong_infer_of_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inferbad.py"
    path.write_text("import opsim\n\n\ndef k(ctx, x, y):\n    yield None\n\n\n"
                    "opsim.register_operator(k, inputs=('x',), outputs=('y',),\n"
                    "                        tiling=lambda spec, inputs, attrs: {'block_dim': 1},\n"
                    "                        infer=lambda inputs: {'y': (inputs['x'].shape, 'fp32')})\n")
    assert cli.main(["run", "--kernel", f"{path}:k", "--shape", "64"]) == 2
    err = capsys.readouterr().err
    assert "infer= must be called as infer(spec, inputs, attrs); <lambda>(inputs) does not take" in err, err


def test_a_builtin_operator_cannot_be_replaced() -> None:
    def k(ctx, x, out):       # pragma: no cover - never launched
        yield None
    with pytest.raises(ValueError, match="built in"):
        opsim.register_operator(k, name="mse_loss_backward", inputs=("x",), outputs=("out",),
                                tiling=lambda *a: {"block_dim": 1})


# -- the registry bug ---------------------------------------------------------------------------

def test_registering_before_the_first_lookup_keeps_every_builtin_operator() -> None:
    code = """
import numpy as np
import opsim
def k(ctx, x, out):
    yield None
opsim.register_operator(k, name="early_op", inputs=("x",), outputs=("out",), tiling=lambda *a: {"block_dim": 1})
from opsim.kernels import registry
print(",".join(registry.names()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    names = out.stdout.strip().split(",")
    assert "early_op" in names
    for builtin in ("mse_loss_backward", "binary_cross_entropy_backward", "embedding_dense_backward",
                    "fused_linear_cross_entropy_loss_grad", "binarycrossentropygrad"):
        assert builtin in names


def test_registering_leaves_builtin_bits_and_cycles_alone() -> None:
    rng = np.random.default_rng(0)
    g, x, y = (rng.standard_normal((16, 512)).astype(np.float32) for _ in range(3))
    before = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y)
    registry.get(ADD)                     # imports the file: registers four more operators
    after = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y)
    assert after.cycles == before.cycles
    assert after.outputs["out"].tobytes() == before.outputs["out"].tobytes()


# -- an asc kernel as an operator, by file spec ----------------------------------------------------

def test_an_asc_kernel_registered_in_a_file_runs_by_file_spec() -> None:
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal(16384).astype(np.float32) for _ in range(2))
    res = opsim.run(ADD, x=x, y=y)
    assert np.array_equal(res.outputs["z"], x + y)
    assert res.stats["block_dim"] == 16 and res.cycles > 0
    # the same operator by its registered name, once the file is loaded
    again = opsim.run("add", x=x, y=y)
    assert again.cycles == res.cycles and np.array_equal(again.outputs["z"], res.outputs["z"])


def test_a_file_spec_that_registers_nothing_says_so() -> None:
    with pytest.raises(KeyError, match="registers no operator 'nothing_here'"):
        registry.get(f"{BUGS}:nothing_here")
    with pytest.raises(KeyError, match="no such file"):
        registry.get("no/such/file.py:op")


def test_opsim_run_kernel_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--kernel", ADD, "--shape", "16384"]) == 0
    out = capsys.readouterr().out
    assert f"operator      {ADD} on atlas-a2 (full mode)" in out and "cycles" in out
    assert cli.main(["run"]) == 2


@pytest.mark.parametrize("mode", ["full", "timing", "numeric", "estimate"])
def test_every_mode_names_a_file_operator_as_it_was_given(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    # estimate mode named `FILE.py:add` by the operator's bare name `add`; the other modes by the
    # name given
    x = np.ones(16384, np.float32)
    assert opsim.run(ADD, mode=mode, x=x, y=x).op == ADD
    assert cli.main(["run", "--kernel", ADD, "--shape", "16384", "--mode", mode]) == 0
    assert f"operator      {ADD} on atlas-a2 ({mode} mode)" in capsys.readouterr().out


def test_a_study_names_a_custom_operator(tmp_path: Path) -> None:
    study = {"study": {"name": "custom", "mode": "timing"},
             "axes": {"operator": [ADD], "device": ["atlas-a2"], "shape": [[8192], [16384]], "dtype": ["fp32"]}}
    result = opsim.sweep(study, tmp_path / "custom.db", workers=1, quiet=True)
    rows = result.rows()
    assert len(rows) == 2 and all(r["error"] in (None, "") for r in rows), rows
    for r in rows:
        n = 8192 if "8192" in r["params"] else 16384
        x = opsim.TensorSpec((n,), "fp32")
        ref = opsim.run(ADD, mode="timing", x=x, y=x)
        assert r["cycles"] == ref.cycles


def test_the_demo_report_covers_a_custom_operator(tmp_path: Path) -> None:
    row, entry, failed = run_case(ADD, "atlas-a2", "fp32", str(tmp_path), False)
    assert not failed and entry is not None and entry["check"] == "bitwise"
    assert (tmp_path / entry["trace"]).exists()
    assert row.startswith(ADD)


def _off_everywhere(x: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    return {"out": x.astype(np.float64) * alpha + 1.0}


def _off_every_20th(x: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    g = x.astype(np.float64) * alpha
    g[::20] += 1.0                    # 205 of 4096 elements: 94.995 % within tolerance
    return {"out": g}


def _relatively_close(x: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    # every element within the fp32 tolerance (relative 2^-14 < 2^-13), yet |error| reaches
    # 2^-14 * 1000 * max|x| > the standard's 1e-2 limit on the largest error
    return {"out": x.astype(np.float64) * alpha * (1 + 2.0**-14)}


# a failing demo row said "FAIL (out 0.000)" (and "FAIL (out 1.000)" for a row failed by its
# largest error): a bare number, the share of elements within tolerance, with nothing saying so
@pytest.mark.parametrize("golden,alpha,verdict", [
    (_off_everywhere, 2.0, "FAIL (out: 0.0 % of elements within tol, 99 % needed, max abs err 1 > 0.01)"),
    (_off_every_20th, 2.0, "FAIL (out: 94.9 % of elements within tol, 99 % needed, max abs err 1 > 0.01)"),
    (_relatively_close, 1000.0, "FAIL (out: max abs err {err:.3g} > 0.01)")])
def test_a_failing_demo_row_says_what_its_figure_is(tmp_path: Path, golden: Any, alpha: float,
                                                   verdict: str) -> None:
    opsim.register_operator(scale_by, name="scale_by_bad_golden", inputs=("x",), outputs=("out",),
                            tiling=_scale_tiling, attrs={"alpha": alpha}, golden=golden, example_shape=(4096,))
    row, entry, failed = run_case("scale_by_bad_golden", "atlas-a2", "fp32", str(tmp_path), False)
    x = registry.get("scale_by_bad_golden").example(np.random.default_rng(0), None, "fp32")["x"]
    err = float(np.max(np.abs((x * np.float32(alpha)).astype(np.float64) - golden(x, alpha)["out"])))
    want = verdict.format(err=err)
    assert failed and entry is not None and entry["check"] == want and row.endswith(want), row


def test_opsim_demo_kernel_restricts_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["demo", "--kernel", "scale_by", "--out", str(tmp_path), "--no-report", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("scale_by ")]
    assert rows and all("bitwise" in r or "within tol" in r for r in rows)
    assert "mse_loss_backward" not in out


def test_the_demo_table_fits_a_long_custom_name_and_counts_failed_runs(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    # a path:name longer than 36 characters pushed its rows' columns out of line with the header,
    # and a run that raised was left out of "N runs" ("0 runs, 8 failed")
    bad = f"{BUGS}:add_out_of_bounds"
    assert cli.main(["demo", "--kernel", ADD, "--kernel", bad, "--out", str(tmp_path), "--no-report",
                     "--workers", "1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], [ln for ln in lines[2:] if ln.startswith(str(BUGS))]
    column = header.index("device")
    assert rows and all(r[column - 1] == " " and r[column] != " " for r in rows), (header, rows)
    n = len(rows)
    assert any(ln.startswith(f"{n} runs, {n // 2} failed") for ln in lines), lines[-1]


def test_op_summary_of_an_asc_operator_lists_its_gm_tensors() -> None:
    # an opsim.asc kernel's launch carried no arguments, so the profiler's op_summary had empty
    # Input/Output Shapes, Data Types and Formats for every custom asc operator
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((16, 1024)).astype(np.float32) for _ in range(2))
    res = opsim.run(ADD, x=x, y=y)
    header, rows = res.tables()["op_summary"]
    (row,) = rows
    got = dict(zip(header, row))
    assert (got["Input Shapes"], got["Input Data Types"], got["Input Formats"]) == ("16,1024;16,1024",
                                                                                   "FLOAT;FLOAT", "ND;ND")
    assert (got["Output Shapes"], got["Output Data Types"], got["Output Formats"]) == ("16,1024", "FLOAT", "ND")


def test_the_sanitizer_row_of_a_python_bug_in_a_registered_kernel_is_the_kernel_line(tmp_path: Path) -> None:
    # opsim.run(sanitize=True): the fault's finding named opsim/api.py:264 (Device.synchronize),
    # where the launch waited, not the kernel line that raised
    from opsim.simulator.errors import SimulatorError
    path = tmp_path / "bugop.py"
    path.write_text("import opsim\nimport opsim.asc as asc\n\n\n@asc.jit\n"
                    "def bad(x: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):\n"
                    "    asc.muls(x, x, undefined_scale, 64)\n\n\n"
                    "opsim.register_operator(bad, inputs=('x',), outputs=('z',),\n"
                    "                        tiling=lambda spec, inputs, attrs: {'block_dim': 1, 'block_length': 64},\n"
                    "                        golden=lambda x: {'z': x}, example_shape=(64,))\n")
    with pytest.raises(SimulatorError, match="internal error in a kernel: NameError") as err:
        opsim.run(f"{path}:bad", x=np.zeros(64, np.float32), sanitize=True)
    (finding,) = err.value.sanitizer.findings
    assert finding.lines == (f"{path}:7",), finding.lines
    assert finding.message.endswith("NameError: name 'undefined_scale' is not defined (the run fails here)"), \
        finding.message
    # the wrapped exception rides on the fault, which still pickles (sweeps' process pools) to the
    # same message, without it
    assert isinstance(err.value.kernel_exception, NameError)
    clone = pickle.loads(pickle.dumps(err.value))
    assert (str(clone), clone.kernel_exception) == (str(err.value), None)


def test_a_python_bug_in_a_registered_asc_kernel_names_its_kernel_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # `opsim run --kernel f.py:bad` said "internal error in a kernel: AttributeError: ..." with
    # nothing naming where in the kernel it arose (the launch path of @asc.jit did, this did not)
    path = tmp_path / "bugop.py"
    path.write_text("import opsim\nimport opsim.asc as asc\n\n\n@asc.jit\n"
                    "def bad(x: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):\n"
                    "    asc.no_such_api(x)\n\n\n"
                    "opsim.register_operator(bad, inputs=('x',), outputs=('z',),\n"
                    "                        tiling=lambda spec, inputs, attrs: {'block_dim': 1, 'block_length': 1024},\n"
                    "                        golden=lambda x: {'z': x}, example_shape=(1024,))\n")
    assert cli.main(["run", "--kernel", f"{path}:bad"]) == 2
    err = capsys.readouterr().err
    assert err == ("opsim: SimulatorError: internal error in a kernel: AttributeError: module 'opsim.asc' has no "
                   f"attribute 'no_such_api' (at kernel line {path}:7)\n"), err


_SHORT_READ = ("import opsim\nimport opsim.asc as asc\n\n\n@asc.jit\n"
               "def rd(x: asc.GlobalAddress, w: asc.GlobalAddress, y: asc.GlobalAddress, block_length: int):\n"
               "    xg, wg = asc.GlobalTensor(), asc.GlobalTensor()\n"
               "    xg.set_global_buffer(x)\n"
               "    wg.set_global_buffer(w)\n"
               "    pipe = asc.TPipe()\n"
               "    q = asc.TQue(asc.TPosition.VECIN, 1)\n"
               "    pipe.init_buffer(q, 1, block_length * 4)\n"
               "    t = q.alloc_tensor(x.dtype)\n"
               "    asc.data_copy(t, wg, block_length)\n"
               "    q.free_tensor(t)\n\n\n"
               "opsim.register_operator(rd, inputs=('x', 'w'), outputs=('y',),\n"
               "                        tiling=lambda spec, inputs, attrs: {'block_dim': 1,\n"
               "                                                            'block_length': inputs['x'].numel},\n"
               "                        golden=lambda x, w: {'y': x}, example_shape=(1024,))\n")


def test_a_machine_fault_of_a_registered_asc_kernel_names_its_kernel_line(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # a copy past the end of a shorter input: opsim.run and `opsim run --kernel` said "MemoryFault
    # on core0.veccore0 pipe MTE2 in DataCopy(...) at 0x...: HBM: out of bounds: ..." with nothing
    # naming the kernel line, which the same kernel's launch kernel[1, stream](...) names
    from opsim.simulator.errors import MemoryFault
    path = tmp_path / "shortop.py"
    path.write_text(_SHORT_READ)
    x, w = np.zeros(1024, np.float32), np.zeros(100, np.float32)
    with pytest.raises(MemoryFault) as err:
        opsim.run(f"{path}:rd", x=x, w=w)
    assert str(err.value).endswith(f"(kernel line {path}:14)"), str(err.value)
    with pytest.raises(MemoryFault) as launched:
        registry.load_file(str(path)).rd[1, None](x, w, np.zeros(1024, np.float32), 1024)
    assert str(launched.value) == str(err.value)
    assert cli.main(["run", "--kernel", f"{path}:rd", "--shape", "1024", "--operand", "w=100"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(f"(kernel line {path}:14)")
    # with the sanitizer, the line is in the finding's row and not repeated in its message
    with pytest.raises(MemoryFault) as checked:
        opsim.run(f"{path}:rd", x=x, w=w, sanitize=True)
    (finding,) = checked.value.sanitizer.findings
    assert finding.lines == (f"{path}:14",) and f"{path}:14" not in finding.message, finding


def _whole_tiles(spec, inputs, attrs):
    tiles = inputs["x"].numel // 1024
    block_dim = max(d for d in range(1, tiles + 1) if tiles % d == 0)   # empty below one tile
    return {"block_dim": block_dim, "length": tiles // block_dim * 1024, "tile_length": 512}


def test_a_tiling_function_that_raises_is_named_with_the_operands(capsys: pytest.CaptureFixture[str]) -> None:
    # a host tiling function that cannot tile a shape (here: fewer elements than one tile) raised
    # its own "ValueError: max() arg is an empty sequence" out of opsim.run, and `opsim run
    # --kernel f.py:op --shape 1000` printed "opsim: max() arg is an empty sequence": nothing
    # named the tiling function, its line or the operands it was given
    opsim.register_operator(scale_by, name="whole_tiles", inputs=("x",), outputs=("out",), tiling=_whole_tiles,
                            attrs={"alpha": 2.0})
    with pytest.raises(opsim.OpError) as err:
        opsim.run("whole_tiles", x=np.zeros(1000, np.float32))
    line = _whole_tiles.__code__.co_firstlineno + 2
    assert err.value.code == 561002
    assert err.value.message == (f"whole_tiles: the tiling function _whole_tiles(spec, inputs, attrs) raised "
                                 f"ValueError: max() arg is an empty sequence (at {__file__}:{line}); "
                                 f"inputs: x 1000 fp32"), err.value.message
    assert isinstance(err.value.__cause__, ValueError)          # the original, for a debugger
    assert opsim.run("whole_tiles", x=np.zeros(2048, np.float32)).stats["block_dim"] == 2
    # a refusal the tiling function makes itself keeps its status and message
    def refuse(spec, inputs, attrs):
        raise opsim.OpError(161002, "x must hold whole tiles of 1024")
    opsim.register_operator(scale_by, name="refusing", inputs=("x",), outputs=("out",), tiling=refuse)
    with pytest.raises(opsim.OpError, match=r"^\[161002\] x must hold whole tiles of 1024$"):
        opsim.run("refusing", x=np.zeros(1000, np.float32))


def test_an_infer_function_that_raises_is_named_with_the_operands() -> None:
    def rows(spec, inputs, attrs):
        r, _ = inputs["x"].shape                # a 1-D input has no second dimension
        return {"out": ((r,), inputs["x"].dtype)}
    opsim.register_operator(scale_by, name="by_rows", inputs=("x",), outputs=("out",), tiling=_scale_tiling,
                            infer=rows)
    with pytest.raises(opsim.OpError) as err:
        opsim.run("by_rows", x=np.zeros(64, np.float16))
    assert err.value.code == 161002
    assert err.value.message.startswith("by_rows: the infer function rows(spec, inputs, attrs) raised ValueError: "
                                        "not enough values to unpack (expected 2, got 1) (at "), err.value.message
    assert err.value.message.endswith("; inputs: x 64 fp16"), err.value.message


def test_an_attribute_of_the_wrong_kind_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    # `opsim run --kernel f.py:op --attr alpha=abc` handed the string to the kernel, which failed
    # as "SimulatorError: internal error in a kernel: ValueError: could not convert string to
    # float: 'abc'"; an attribute's default says what kind of value it takes
    opsim.register_operator(scale_by, name="kinds", inputs=("x",), outputs=("out",), tiling=_scale_tiling,
                            attrs={"alpha": 2.0, "tile_length": 512, "fast": False, "variant": "a", "free": None})
    x = np.ones(1024, np.float32)
    for attr, value, kind in (("alpha", "abc", "a number"), ("alpha", True, "a number"),
                              ("tile_length", 2.5, "an integer"), ("fast", 1, "True or False"),
                              ("variant", 3, "a string")):
        with pytest.raises(opsim.OpError) as err:
            opsim.run("kinds", x=x, **{attr: value})
        default = {"alpha": 2.0, "tile_length": 512, "fast": False, "variant": "a"}[attr]
        assert (err.value.code, err.value.message) == (
            161002, f"kinds: attribute {attr}={value!r} must be {kind} (its default is {default!r})"), err.value
    # what the default allows runs: an int or numpy scalar for a float, anything for a None default
    for ok in ({"alpha": 3}, {"alpha": np.float32(0.5)}, {"tile_length": np.int64(512)}, {"free": "x"}):
        assert opsim.run("kinds", x=x, **ok).cycles > 0, ok
    opsim.register_operator(scale_by, name="scaled", inputs=("x",), outputs=("out",), tiling=_scale_tiling,
                            attrs={"alpha": 2.0})
    assert cli.main(["run", "--kernel", "scaled", "--shape", "1024", "--attr", "alpha=abc"]) == 2
    assert capsys.readouterr().err == ("opsim: rejected with status 161002: scaled: attribute alpha='abc' must be "
                                       "a number (its default is 2.0)\n")


def test_a_kernel_file_imports_the_modules_beside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a kernel file that imports its own helper module (`from my_tiling import ...`, beside it, as
    # `python my_op.py` would find it) could not be loaded: "my_op.py:2: cannot import it:
    # ModuleNotFoundError: No module named 'audit_helper_tiling'"
    (tmp_path / "audit_helper_tiling.py").write_text(
        "def tiling(spec, inputs, attrs):\n"
        "    return {'block_dim': 2, 'length': inputs['x'].numel, 'tile_length': 512}\n")
    (tmp_path / "helped.py").write_text(
        "import opsim\nfrom audit_helper_tiling import tiling\n"
        f"from {__name__} import scale_by\n"
        "opsim.register_operator(scale_by, name='helped', inputs=('x',), outputs=('out',), tiling=tiling,\n"
        "                        attrs={'alpha': 2.0})\n")
    before = list(sys.path)
    try:
        x = np.arange(2048, dtype=np.float32)
        res = opsim.run(f"{tmp_path / 'helped.py'}:helped", x=x)
        assert np.array_equal(res.outputs["out"], x * np.float32(2.0)) and res.stats["block_dim"] == 2
        assert sys.path == before                 # the file's directory is on the path only while it loads
    finally:
        sys.modules.pop("audit_helper_tiling", None)


def test_a_demo_row_names_a_missing_output_a_wrong_shape_and_a_non_bitwise_integer_output() -> None:
    # these read "FAIL (out shape)" and "FAIL (out)"
    from opsim.demo import _check
    ref = {"out": np.arange(6, dtype=np.int32).reshape(2, 3)}
    assert _check({}, ref) == "FAIL (out: missing)"
    assert _check({"out": np.zeros(6, np.int32)}, ref) == "FAIL (out: shape (6,), golden (2, 3))"
    assert _check({"out": ref["out"] + 1}, ref) == "FAIL (out: not bitwise, and int32 has no tolerance)"
    assert _check({"out": ref["out"].copy()}, ref) == "bitwise"
