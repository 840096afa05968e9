"""The opsim command line."""
from __future__ import annotations

import importlib
import json
import re

import pytest

from opsim.cli import main


def test_run_prints_cycles_tiling_bandwidth_and_bound(tmp_path, capsys):
    trace = tmp_path / "out.json"
    rc = main(["run", "mse_loss_backward", "--device", "atlas-a2", "--shape", "64x4096", "--dtype", "bf16",
               "--reduction", "mean", "--trace", str(trace)])
    out = capsys.readouterr().out
    assert rc == 0
    for word in ("cycles", "block_dim", "tile_length", "bytes moved", "GB/s achieved", "peak", "bound"):
        assert word in out
    doc = json.loads(trace.read_text())
    assert doc["displayTimeUnit"] == "ns" and any(e["ph"] == "X" for e in doc["traceEvents"])


def test_run_shows_only_the_tiling_fields_a_plan_has(capsys):
    # the embedding's row plans have no tile length or buffer count: no "tile_length None"
    assert main(["run", "embedding_dense_backward", "--device", "atlas-a2", "--mode", "timing"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("block_dim"))
    assert "None" not in line and line.split() == ["block_dim", "48"]


def _link_lines(out: str) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in out.splitlines() if len(ln.split()) > 1 and ln.split()[1] == "link"}


def test_estimate_shows_every_link_it_counts_bytes_on_with_its_peak_as_timing_does(capsys):
    # MSE fp32 64x256 on atlas-a2 (the CLI's default shape): its 65536 B of stores go into the
    # write-back L2 (the L2 takes them; HBM carries none within the call). The estimate printed
    # only "HBM link ... read 196608, write 0 B" and hid the L2's bytes
    import opsim
    spec = opsim.device_spec("atlas-a2")
    lines = {}
    for mode in ("estimate", "timing"):
        assert main(["run", "mse_loss_backward", "--device", "atlas-a2", "--mode", mode]) == 0
        lines[mode] = _link_lines(capsys.readouterr().out)
    assert set(lines["estimate"]) == set(lines["timing"]) == {"HBM", "L2"}
    est = lines["estimate"]
    assert est["L2"].endswith(f"write {64 * 256 * 4} B") and f"of {spec.l2.bandwidth / 1e9:.1f} GB/s peak" in est["L2"]
    assert est["HBM"].endswith(f"read {3 * 64 * 256 * 4} B") and "write 0" not in est["HBM"]
    for line in est.values():       # never a rate above the link's peak
        achieved, peak = (float(w) for w in line.split() if w.replace(".", "").isdigit() and "." in w)
        assert achieved <= peak


def test_run_reports_a_rejected_call_with_its_status(capsys):
    rc = main(["run", "mse_loss_backward", "--device", "atlas-training", "--dtype", "bf16"])
    assert rc == 2 and "161002" in capsys.readouterr().err


def test_run_timing_mode_with_tiling_and_device_overrides(capsys):
    rc = main(["run", "mse_loss_backward", "--shape", "1048576", "--mode", "timing", "--tiling", "block_dim=4",
               "--set", "ub.size=262144", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["stats"]["block_dim"] == 4 and doc["mode"] == "timing"


def test_devices_lists_the_catalogue_with_provenance(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "atlas-a2" in out and "ft78ne" in out and "source" in out and "assumption" in out


def test_demo_runs_every_operator_and_checks_goldens(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path), "--no-report"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "mse_loss_backward" in out and "bitwise" in out and " 0 failed" in out
    assert any(p.suffix == ".json" for p in tmp_path.iterdir())


def test_every_command_prints_its_help(capsys):
    import pytest
    from opsim.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        nested = [a for a in parser._actions if getattr(a, "choices", None) and a.dest != "help"
                  and isinstance(a.choices, dict)]
        commands = [[name]] + [[name, n] for a in nested for n in a.choices]
        for argv in commands:
            with pytest.raises(SystemExit) as ei:
                main([*argv, "--help"])
            assert ei.value.code == 0, argv
    assert "usage" in capsys.readouterr().out


def test_run_json_keeps_stdout_one_json_document_when_it_also_writes_files(tmp_path, capsys):
    # the "trace/tables/report <path>" lines once followed the JSON on stdout: `| jq` broke
    rc = main(["run", "mse_loss_backward", "--json", "--trace", str(tmp_path / "t.json"),
               "--csv", str(tmp_path / "t.csv"), "--report", str(tmp_path / "r.html")])
    captured = capsys.readouterr()
    assert rc == 0
    assert json.loads(captured.out)["op"] == "mse_loss_backward"
    for name in ("t.json", "t.csv", "r.html"):
        assert (tmp_path / name).exists() and name in captured.err


def test_run_into_a_path_that_cannot_be_written_is_an_error_not_a_traceback(tmp_path, capsys, monkeypatch):
    import opsim
    ran = []
    monkeypatch.setattr(opsim, "run", lambda *a, **k: ran.append(a))   # refused before any run
    blocker = tmp_path / "afile"
    blocker.write_text("")
    cases = [(blocker / "x.out", f"{blocker} is not a directory"),
             (blocker / "sub" / "x.out", f"{blocker} is not a directory"),    # no directory can be made
             (tmp_path, "is a directory; give a file name")]
    for flag in ("--trace", "--report", "--csv"):
        for target, why in cases:
            rc = main(["run", "mse_loss_backward", flag, str(target)])
            err = capsys.readouterr().err
            assert rc == 2, flag
            assert f"opsim: {flag} {target}: {why}" in err, err
    assert not ran


def test_run_creates_the_missing_parent_directories_of_every_output_file(tmp_path, capsys):
    # `opsim sweep --db new/dir/x.db` made its directories; `opsim run --trace new/dir/t.json` was
    # refused with "directory .../new/dir does not exist"
    outs = {"--trace": tmp_path / "a" / "b" / "t.json", "--report": tmp_path / "c" / "r.html",
            "--csv": tmp_path / "d" / "e" / "f" / "t.csv"}
    argv = ["run", "mse_loss_backward", "--shape", "256"]
    for flag, path in outs.items():
        argv += [flag, str(path)]
    assert main(argv) == 0, capsys.readouterr().err
    for path in outs.values():
        assert path.is_file() and path.stat().st_size > 0, path
    assert (tmp_path / "d" / "e" / "f" / "t_pipe_utilization.csv").is_file()   # the tables beside it


def test_run_reports_a_write_that_fails_after_the_run_as_a_one_line_error(tmp_path, capsys, monkeypatch):
    # the check before the run cannot see everything (a full disk): the write's own error is
    # still one line with exit status 2
    from opsim.traces import trace as trace_mod
    def fail(self, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(trace_mod.Trace, "to_chrome_json", fail)
    target = tmp_path / "t.json"
    assert main(["run", "mse_loss_backward", "--shape", "256", "--trace", str(target)]) == 2
    assert f"opsim: --trace {target}: No space left on device" in capsys.readouterr().err


def test_demo_with_an_unknown_kernel_or_an_impossible_out_directory_says_so(tmp_path, capsys):
    assert main(["demo", "--no-report", "--out", str(tmp_path), "--kernel", "no_such_op"]) == 2
    assert "unknown operator 'no_such_op'" in capsys.readouterr().err
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert main(["demo", "--no-report", "--out", str(blocker / "d"), "--kernel", "mse_loss_backward"]) == 2
    assert f"opsim demo: --out {blocker / 'd'}: Not a directory" in capsys.readouterr().err


def test_run_refuses_a_negative_seed_naming_the_option(capsys):
    # it built the operands first and ended with numpy's 'ValueError: expected non-negative integer'
    import pytest
    with pytest.raises(SystemExit) as exc:
        main(["run", "mse_loss_backward", "--shape", "16", "--mode", "estimate", "--seed", "-1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "-1" in err and ">= 0" in err
    with pytest.raises(SystemExit) as exc:    # opsim check: the same
        main(["check", "examples/kernels/leaky_relu.py:leaky_relu_kernel", "--seed", "-1"])
    assert exc.value.code == 2 and "argument --seed: -1 must be an integer >= 0" in capsys.readouterr().err


def test_a_misspelt_operator_device_or_field_gets_one_line_with_the_likely_name(capsys):
    # the operator's message came out as `KeyError: "…"` (Python's quoting) with no suggestion
    cases = [(["run", "mse_los_backward"], "opsim: unknown operator 'mse_los_backward' "
                                            "(did you mean 'mse_loss_backward'?); known operators: "),
             (["run", "mse_loss_backward", "--device", "atlas_a2"],
              "unknown device 'atlas_a2' (did you mean 'atlas-a2'?); known devices: "),
             (["run", "mse_loss_backward", "--set", "ub.sise=1"],
              "unknown field 'ub.sise' (did you mean 'ub.size'?); known fields: ")]
    for argv, want in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert want in err and err.count("\n") == 1 and "KeyError" not in err and '"' not in err, err


def test_an_empty_shape_says_that_nothing_was_launched(capsys):
    # `--shape 64x0` printed "cycles 0" and "block_dim 0" with no word of why
    assert main(["run", "mse_loss_backward", "--shape", "64x0"]) == 0
    out = capsys.readouterr().out
    assert "empty         an operand has no elements: the call succeeds and launches nothing" in out
    assert main(["run", "mse_loss_backward", "--shape", "64x4"]) == 0
    assert "empty" not in capsys.readouterr().out


def test_a_key_value_option_without_a_value_is_a_usage_error_exit_2(capsys):
    # `--tiling block_dim` left by SystemExit(str), status 1, which `opsim check` documents as
    # "findings": a typo read as a sanitizer finding
    import pytest
    cases = [["run", "mse_loss_backward", "--tiling", "block_dim"],
             ["run", "mse_loss_backward", "--attr", "reduction"],
             ["run", "mse_loss_backward", "--set", "ub.size"],
             ["capacity", "mse_loss_backward", "--device", "atlas-a2", "--set", "ub.size"],
             ["check", "examples/kernels/add_manual_flags.py:add_kernel", "--arg", "block_length"]]
    for argv in cases:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2, argv
        flag, item = argv[-2], argv[-1]
        assert f"{flag} {item!r} must be KEY=VALUE" in err and err.count("\n") == 1, err


def test_run_refuses_an_operator_name_and_a_kernel_together(capsys):
    # the positional operator was dropped in silence and the kernel run instead
    assert main(["run", "mse_loss_backward", "--kernel", "examples/kernels/sanitizer_bugs.py:add"]) == 2
    err = capsys.readouterr().err
    assert "mse_loss_backward" in err and "--kernel" in err and "not both" in err


def test_run_refuses_a_trace_file_a_run_would_not_write(tmp_path, capsys, monkeypatch):
    # numeric and estimate mode, and --trace-level off, record no trace: the run ended with
    # status 0 and no file, without a word
    import opsim
    ran = []
    monkeypatch.setattr(opsim, "run", lambda *a, **k: ran.append(a))   # refused before any run
    target = tmp_path / "t.json"
    for extra, why in ((["--mode", "numeric"], "--mode numeric records no trace"),
                       (["--mode", "estimate"], "--mode estimate records no trace"),
                       (["--trace-level", "off"], "--trace-level off records no trace")):
        assert main(["run", "mse_loss_backward", "--trace", str(target), *extra]) == 2
        err = capsys.readouterr().err
        assert f"opsim: --trace {target}: {why}" in err, err
    assert not ran and not target.exists()


def test_check_of_a_kernel_with_a_python_bug_is_one_line_naming_the_kernel_line(tmp_path, capsys):
    # the kernel's own exception escaped `opsim check` as a traceback with status 1 ("findings")
    path = tmp_path / "buggy.py"
    path.write_text("import opsim.asc as asc\n\n\n@asc.jit\ndef div0(x: asc.GlobalAddress, n: int):\n"
                    "    return 1 // n\n")
    assert main(["check", f"{path}:div0", "--arg", "n=0"]) == 2
    err = capsys.readouterr().err
    assert err == (f"opsim check: the kernel raised ZeroDivisionError: integer division or modulo by zero "
                   f"(at kernel line {path}:6)\n"), err


def _own_registry(monkeypatch):
    from opsim.kernels import registry
    registry.names()
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FILES", dict(registry._FILES))


def _operator_file(path, body: str) -> None:
    path.write_text("import opsim\nimport opsim.asc as asc\n\n\n@asc.jit\n"
                    "def bad(x: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int):\n"
                    f"    {body}\n\n\n"
                    "opsim.register_operator(bad, inputs=('x',), outputs=('z',),\n"
                    "                        tiling=lambda spec, inputs, attrs: {'block_dim': 1, 'block_length': 64},\n"
                    "                        golden=lambda x: {'z': x}, example_shape=(64,))\n")


def test_check_summary_counts_a_fault_that_is_no_memcheck_finding(tmp_path, capsys, monkeypatch):
    # a registered operator's kernel that calls what opsim.asc does not model: the fault was one
    # finding, under check "fault", but the summary said "1 finding(s): racecheck 0, memcheck 0,
    # synccheck 0"
    _own_registry(monkeypatch)
    monkeypatch.chdir(tmp_path)      # the kernel's source line is shown relative to the cwd
    path = tmp_path / "bugop.py"
    _operator_file(path, "asc.fused_mul_add(x, x, x, 64)")
    assert main(["check", f"{path}:bad"]) == 1
    out = capsys.readouterr().out
    assert "\nfault: fault on core0.veccore0: UnsupportedAPI: asc.fused_mul_add" in out, out
    assert "    SCALAR  __getattr__  at bugop.py:7\n" in out, out
    last = out.splitlines()[-1]
    assert last == f"opsim check {path}:bad: 1 finding(s): racecheck 0, memcheck 0, synccheck 0, fault 1", last


@pytest.mark.parametrize("registered", [True, False])
def test_check_of_a_python_bug_is_status_2_naming_the_kernel_line_either_way(registered, tmp_path, capsys,
                                                                            monkeypatch):
    # a registered operator's kernel with a NameError printed a report whose row was opsim/api.py:264
    # and exited 1 ("findings"); the same kernel as a plain @asc.jit kernel exited 2 naming its line
    _own_registry(monkeypatch)
    path = tmp_path / "bugop.py"
    _operator_file(path, "asc.muls(x, x, undefined_scale, 64)")
    extra = [] if registered else ["--arg", "block_length=64"]
    if not registered:
        path.write_text(path.read_text().split("\n\n\nopsim.register_operator")[0] + "\n")
    assert main(["check", f"{path}:bad", *extra]) == 2
    cap = capsys.readouterr()
    assert cap.err == (f"opsim check: the kernel raised NameError: name 'undefined_scale' is not defined "
                       f"(at kernel line {path}:7)\n"), cap.err
    assert cap.out == ""


def test_check_refuses_an_arg_that_is_not_of_its_parameter_type(capsys):
    # `--arg block_length=abc` ran the kernel with a string ("the kernel raised ValueError: invalid
    # literal for int()"), `--arg buffer_num=2.5` ran it and reported misaligned buffers as a finding
    target = "examples/kernels/add_manual_flags.py:add_kernel"
    for given, name, value, kind, want in (("block_length=abc", "block_length", "'abc'", "int", "an integer"),
                                           ("buffer_num=2.5", "buffer_num", "2.5", "int", "an integer")):
        other = "buffer_num=2" if name == "block_length" else "block_length=64"
        assert main(["check", target, "--shape", "64", "--arg", given, "--arg", other]) == 2, given
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == (
            f"opsim check: --arg {name}={value}: add_kernel's parameter '{name}' is annotated "
            f"{kind}; give {want}\n"), captured


def test_check_names_an_unknown_device_before_a_missing_arg(capsys):
    # a wrong --device surfaced only after everything else was given: first "give parameter
    # 'block_length' with --arg", and for an operator after its operands were built
    for target in ("examples/kernels/add_manual_flags.py:add_kernel", "examples/kernels/sanitizer_bugs.py:add"):
        assert main(["check", target, "--device", "nosuch"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("opsim check: unknown device 'nosuch'; known devices: atlas-")
        assert "atlas-a2, " in err and err.count("\n") == 1, err


@pytest.mark.parametrize("op", ["mse_loss_backward", "binary_cross_entropy_backward"])
def test_attr_reduction_none_is_the_reduction_name_as_with_reduction(op, capsys):
    # `--attr reduction=none` reached the operator as Python's None and was refused with
    # "reduction None must be ... or one of 'none', 'mean', 'sum'": the name the message allows
    assert main(["run", op, "--mode", "timing", "--json", "--reduction", "none"]) == 0
    by_option = json.loads(capsys.readouterr().out)["cycles"]
    assert main(["run", op, "--mode", "timing", "--json", "--attr", "reduction=none"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["cycles"] == by_option and "None" not in captured.err


def test_run_on_a_dsp_names_its_private_memory_and_no_l2(capsys):
    # the DSPs have no UB and no L2: `opsim run` on one printed "UB peak" and "bytes moved ...
    # (GM addresses, L2 hits included)"; an Ascend part keeps both words
    for mode in ("timing", "estimate"):
        assert main(["run", "binarycrossentropygrad", "--device", "mt7004", "--dtype", "fp16", "--mode", mode]) == 0
        out = capsys.readouterr().out
        assert "UB" not in out and "L2" not in out, out
        assert "(DSP private memory)" in out.split("local peak", 1)[1].splitlines()[0]
    assert main(["run", "mse_loss_backward", "--mode", "timing"]) == 0
    out = capsys.readouterr().out
    assert "UB peak" in out and "L2 hits included" in out


@pytest.mark.parametrize("mode", ["timing", "full"])
def test_dsp_bce_with_reduction_none_gets_one_dloss_per_element(mode, capsys):
    # reduction none (0) takes a dloss per element; the recipe always made one, so
    # `opsim run binarycrossentropygrad --reduction none` was refused: "dloss has 1 elements;
    # it must have input_size = 1024 (reduction 0: one per element)"
    rc = main(["run", "binarycrossentropygrad", "--device", "ft78ne", "--shape", "2048", "--mode", mode,
               "--reduction", "none"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "dloss 2048 fp32" in captured.out
    # the reductions that take one dloss keep the one-element dloss
    assert main(["run", "binarycrossentropygrad", "--device", "ft78ne", "--shape", "2048", "--mode", mode,
                 "--attr", "reduction=sum"]) == 0
    assert "dloss 1 fp32" in capsys.readouterr().out


def test_demo_rows_name_the_gm_link_their_rate_is_on(tmp_path, capsys):
    # the column said "GB/s" for the HBM of atlas-a2 and the DDR of atlas-inference alike
    import opsim
    from opsim.demo import run_demo
    assert run_demo(out_dir=str(tmp_path), reports=False, workers=1, ops=["mse_loss_backward"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], [ln for ln in lines[2:] if ln.startswith("mse_loss_backward")]
    assert "GM link GB/s" in header and " GB/s " not in header.replace("GM link GB/s", "")
    kinds = set()
    for row in rows:
        cells = row.split()
        kind = opsim.device_spec(cells[1]).gm.kind
        kinds.add(kind)
        assert cells[6] == kind, row                    # the link, then its rate
        float(cells[7])
    assert kinds == {"HBM", "DDR"}


def test_run_says_each_pipes_figure_is_from_its_own_busiest_core(capsys):
    # "pipes busy ... (busiest core)" read as one core's figures; each pipe's is its own busiest
    # core's (stats["pipe_busy"]), and those can be different cores
    assert main(["run", "mse_loss_backward", "--device", "atlas-a2", "--shape", "64x4096", "--dtype", "bf16",
                 "--reduction", "mean"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pipes busy"))
    assert line.endswith("(each pipe's busiest core)"), line


def test_a_refused_command_line_names_no_python_class(capsys):
    # "opsim: ValueError: fused_linear_cross_entropy_loss_grad: the example shape is BT x H x V ...",
    # "opsim: SpecError: unknown device ...": the user gave a wrong value, not a Python error
    for argv in (["run", "fused_linear_cross_entropy_loss_grad", "--shape", "17x64", "--mode", "estimate"],
                 ["run", "mse_loss_backward", "--device", "nosuch", "--mode", "estimate"],
                 ["run", "mse_loss_backward", "--operand", "nosuch=4", "--mode", "estimate"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("opsim: ") and err.count("\n") == 1, err
        assert not re.match(r"opsim: \w+(Error|Exception):", err), err
    assert main(["run", "fused_linear_cross_entropy_loss_grad", "--shape", "17x64", "--mode", "estimate"]) == 2
    assert capsys.readouterr().err.startswith("opsim: fused_linear_cross_entropy_loss_grad: the example shape is ")


@pytest.mark.parametrize("given", ["0", "-1", "1025", "two"])
def test_demo_and_sweep_refuse_the_same_worker_counts_with_the_same_message(given, monkeypatch, capsys):
    # `opsim demo --workers 0` ran (0 meant the default), `opsim sweep --workers 0` was refused;
    # both help texts document N worker processes, default the CPU count
    ran = []
    monkeypatch.setattr("opsim.demo.run_demo", lambda **kw: ran.append(kw) or 0)
    # opsim.sweep is also the function opsim exports: patch the module's
    monkeypatch.setattr(importlib.import_module("opsim.sweep"), "sweep", lambda *a, **kw: ran.append(kw))
    errors = []
    for argv in (["demo", "--workers", given], ["sweep", "examples/studies/elementwise_tiling_a2_a3.toml",
                                                "--workers", given]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
        errors.append(capsys.readouterr().err.splitlines()[-1])
    assert ran == []
    want = (f"argument --workers: {given!r} is not a number of worker processes; give an integer from 1 to "
            f"1024 (default: the CPU count)")
    assert errors == [f"opsim demo: error: {want}", f"opsim sweep: error: {want}"], errors


def test_demo_and_sweep_take_a_worker_count_in_range(monkeypatch):
    ran = []
    monkeypatch.setattr("opsim.demo.run_demo", lambda **kw: ran.append(kw["workers"]) or 0)
    assert main(["demo", "--workers", "1"]) == 0 and main(["demo"]) == 0
    assert ran == [1, None]


@pytest.mark.parametrize("workers", [0, -1, 1025, True, 2.0, "2"], ids=repr)
def test_run_demo_refuses_a_worker_count_outside_what_the_cli_takes(tmp_path, capsys, workers):
    # `opsim demo --workers` takes 1..1024; the Python entry ran 0 as the CPU count, -1 in process
    # and "2" into a TypeError from the comparison
    from opsim.demo import run_demo
    out = tmp_path / "out"
    with pytest.raises(ValueError) as err:
        run_demo(out_dir=str(out), reports=False, workers=workers, ops=["mse_loss_backward"])
    assert str(err.value) == f"run_demo: workers must be an integer from 1 to 1024 (or None: the CPU count), " \
                             f"got {workers!r}"
    assert capsys.readouterr().out == "" and not out.exists()     # refused before any work
