"""The command line reaches every operator: shape-only modes build no data, every operand and
attribute is settable and listed by `opsim ops NAME`, FLCE runs in both of its modes, one flag for
device overrides, --version, python -m opsim, quiet when its reader goes away."""
from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys

import numpy as np
import pytest

import opsim
from opsim.cli import main
from opsim.cli_operands import build
from opsim.kernels import registry
from opsim.simulator import numerics as nx

FLCE = "fused_linear_cross_entropy_loss_grad"


def _device_for(op):
    return "ft78ne" if op == "binarycrossentropygrad" else "atlas-a2"


@pytest.mark.parametrize("name", registry.names())
def test_every_operator_has_a_shape_only_recipe_equal_to_its_example(name):
    op = registry.get(name)
    spec = opsim.device_spec(_device_for(name))
    assert op.example_shapes is not None
    variants = [{}, {"mode": "high_performance"}, {"packed_mask": True}] if name == FLCE else [{}]
    shapes = [(5, 8, 9)] if name == FLCE else [(7, 5, 3), (9,)]
    for dtype in op.dtypes(spec):
        for variant in variants:
            for shape in [None, *shapes]:
                args = () if shape is None else (shape,)
                data = op.example(np.random.default_rng(0), spec, dtype, *args, **variant)
                recipe = op.example_shapes(spec, dtype, *args, **variant)
                assert set(data) == set(recipe)
                for k, v in data.items():
                    if isinstance(v, np.ndarray):
                        assert recipe[k][0] == v.shape and nx.dtype(recipe[k][1]).np_dtype == v.dtype, k
                    else:
                        assert recipe[k] == v, k


@pytest.mark.parametrize("name", registry.names())
def test_timing_and_estimate_operands_are_shapes_only(name, monkeypatch):
    op = registry.get(name)

    @functools.wraps(op.example)
    def no_data(*a, **k):
        raise AssertionError("the example recipe built host data in a shape-only mode")
    monkeypatch.setitem(registry._OPS, name, dataclasses.replace(op, example=no_data))
    kwargs = build(name, opsim.device_spec(_device_for(name)), None, None, 0, "estimate", {})
    tensors = {k: v for k, v in kwargs.items() if k in (*op.inputs, *op.optional)}
    assert tensors and all(isinstance(v, opsim.TensorSpec) for v in tensors.values())


def test_estimate_at_two_to_the_34_elements_answers_with_little_host_memory():
    # 131072 x 131072 = 2^34 elements per operand (64 GiB in fp32); the device gets a larger HBM
    # the child's own peak RSS is VmHWM of its memory map: ru_maxrss would carry over the
    # parent's high-water mark across exec (the test process can be hundreds of MB by now)
    code = ("import sys\nfrom opsim.cli import main\n"
            "rc = main(['run', 'mse_loss_backward', '--mode', 'estimate', '--shape', '131072x131072', "
            "'--set', 'gm.capacity=1099511627776', '--set', 'gm.window=1099511627776'])\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
            "print('maxrss_kb', hwm)\nsys.exit(rc)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "grad_output 131072x131072 fp32" in res.stdout and "cycles" in res.stdout
    rss_kb = int(res.stdout.split("maxrss_kb")[1])
    assert rss_kb < 200 * 1024, rss_kb


def test_a_simulator_error_is_named_once_on_the_command_line(capsys):
    # 2^34 fp32 elements per operand need 256 GiB of HBM, more than any product has
    assert main(["run", "mse_loss_backward", "--mode", "estimate", "--shape", "131072x131072"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opsim: CapacityError: mse_loss_backward needs") and err.count("CapacityError") == 1


def test_full_mode_refuses_operands_over_the_host_memory_budget_before_making_them(capsys, monkeypatch):
    monkeypatch.setenv("OPSIM_HOST_MEMORY_BUDGET", "64M")
    assert main(["run", "mse_loss_backward", "--shape", "16384x65536"]) == 2
    err = capsys.readouterr().err
    assert "12.0 GiB of host memory" in err and "budget of 64.0 MiB" in err


def test_flce_runs_from_the_cli_in_both_modes(capsys):
    for extra, operand in (([], "logits_max 17 fp32"), (["--attr", "mode=high_performance"], "softmax 17x1000 fp32")):
        assert main(["run", FLCE, "--dtype", "bf16", *extra]) == 0
        out = capsys.readouterr().out
        assert "cycles" in out and operand in out and "outputs       input_grad 17x64 bf16, weight_grad 1000x64 bf16" in out
    assert main(["run", FLCE, "--shape", "32x64x256", "--mode", "timing", "--attr", "mode=high_performance"]) == 0
    assert "softmax 32x256 fp32" in capsys.readouterr().out


def test_flce_with_a_two_dimensional_shape_says_what_the_shape_is(capsys):
    assert main(["run", FLCE, "--shape", "64x4096"]) == 2
    err = capsys.readouterr().err
    assert "BT x H x V" in err and "got 2: 64x4096" in err


def test_an_unknown_attribute_is_named_and_mode_points_at_the_run_mode(capsys):
    assert main(["run", "mse_loss_backward", "--attr", "mode=fast"]) == 2
    err = capsys.readouterr().err
    assert "'mode'" in err and "--mode" in err and "allowed: reduction" in err


def test_operands_are_settable_one_by_one(tmp_path, capsys):
    # BCE without its optional weight; one operand of another dtype; one of a shape that does not
    # broadcast (rejected by the operator's own validation, with its status code)
    assert main(["run", "binary_cross_entropy_backward", "--operand", "weight=none", "--shape", "8x64"]) == 0
    out = capsys.readouterr().out
    assert "weight" not in out.split("operands")[1].split("\n")[0]
    assert main(["run", "mse_loss_backward", "--operand", "target=:fp16", "--shape", "8x64", "--mode", "timing"]) == 2
    assert "target has dtype FLOAT16" in capsys.readouterr().err
    assert main(["run", "binary_cross_entropy_backward", "--operand", "target=8x32", "--shape", "8x64"]) == 2
    assert "status 161002" in capsys.readouterr().err
    # data from a file: the output equals the golden of that data
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(4, 64)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", "mse_loss_backward", "--shape", "4x64", "--mode", "numeric", "--reduction", "none",
                 "--operand", f"self=@{tmp_path / 'x.npy'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "numeric"
    kwargs = build("mse_loss_backward", opsim.device_spec("atlas-a2"), None, (4, 64), 0, "full",
                   {"reduction": "none"}, [f"self=@{tmp_path / 'x.npy'}"])
    assert np.array_equal(kwargs["self"], x) and kwargs["grad_output"].shape == (4, 64)
    assert main(["run", "mse_loss_backward", "--operand", "nope=4"]) == 2
    assert "not an operand; operands are grad_output, self, target, out" in capsys.readouterr().err


def test_numeric_mode_prints_its_check_and_no_cycles(capsys):
    assert main(["run", "mse_loss_backward", "--shape", "4x64", "--mode", "numeric", "--reduction", "none"]) == 0
    out = capsys.readouterr().out
    assert "cycles        " not in out and "numpy golden" in out
    kwargs = build("mse_loss_backward", opsim.device_spec("atlas-a2"), None, (4, 64), 0, "numeric",
                   {"reduction": "none"})
    golden = opsim.run("mse_loss_backward", mode="numeric", **kwargs).outputs["out"]
    import hashlib
    assert hashlib.sha256(golden.tobytes()).hexdigest()[:16] in out
    assert f"max {golden.max():.6g}" in out


@pytest.mark.parametrize("name", registry.names())
def test_ops_name_lists_every_operand_and_attribute(name, capsys):
    assert main(["ops", name]) == 0
    out = capsys.readouterr().out
    op = registry.get(name)
    for word in (*op.inputs, *op.optional, *op.outputs, *op.attrs, "--shape"):
        assert word in out
    if name == FLCE:
        assert "mode='memory_saving'" in out and "BTxH" in out


def test_ops_of_an_unknown_operator_is_an_error(capsys):
    assert main(["ops", "nope"]) == 2
    assert "unknown operator 'nope'" in capsys.readouterr().err


def test_one_flag_for_device_overrides_with_the_old_spelling_deprecated(capsys):
    assert main(["capacity", "mse_loss_backward", "--device", "atlas-a2", "--set", "ub.size=131072"]) == 0
    new = capsys.readouterr()
    assert main(["capacity", "mse_loss_backward", "--device", "atlas-a2", "--override", "ub.size=131072"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and "deprecated" in old.err and not new.err
    assert main(["run", "mse_loss_backward", "--mode", "estimate", "--override", "ub.size=131072", "--json"]) == 0
    assert "deprecated" in capsys.readouterr().err


def test_version_and_python_dash_m(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0
    from importlib.metadata import version
    assert capsys.readouterr().out.strip() == f"opsim {version('opsim')}"
    res = subprocess.run([sys.executable, "-m", "opsim", "ops"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "mse_loss_backward" in res.stdout


@pytest.mark.parametrize("argv", [["devices"], ["ops"], ["ops", FLCE], ["run", "mse_loss_backward", "--mode", "estimate"]])
def test_a_reader_that_goes_away_gets_a_quiet_exit(argv):
    # the reading end is closed before opsim writes anything: every write meets a broken pipe
    proc = subprocess.Popen([sys.executable, "-m", "opsim", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


def test_devices_piped_into_head_exits_quietly():
    res = subprocess.run(f"{sys.executable} -m opsim devices | head -1", shell=True, capture_output=True,
                         text=True, timeout=60)
    assert res.stdout.startswith("== ") and res.stderr == ""


def test_an_unknown_operand_dtype_lists_the_allowed_names(capsys):
    # `--operand self=4x4:fp99` said only "unknown dtype 'fp99'"; `--dtype fp99` lists the names
    assert main(["run", "mse_loss_backward", "--operand", "self=4x4:fp99"]) == 2
    err = capsys.readouterr().err
    try:
        nx.dtype("fp99")
    except ValueError as exc:
        allowed = str(exc)
    assert "allowed names: fp32" in allowed
    assert err == f"opsim: --operand self: {allowed}\n", err
