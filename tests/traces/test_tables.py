"""Vendor-shaped profiler tables: op_summary (one row per kernel launch), PipeUtilization (per
core), instr_exe and code_exe (hot spots per instruction kind and kernel source line)."""
from __future__ import annotations

import csv
import os

import numpy as np
import pytest

import opsim
from opsim.cli import main as cli_main
from opsim.kernels import registry
from opsim.traces.loader import load_chrome
from opsim.traces.tables import (code_exe, instr_exe, op_summary, pipe_utilization, records_from_trace,
                                 write_tables)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the vendor's documented column names (docs/profiling.md gives the sources)
VENDOR_OP_SUMMARY = ["Op Name", "OP Type", "Task Type", "Stream ID", "Task Start Time(us)",
                     "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
                     "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                     "Output Data Types", "Output Formats"]
VENDOR_AIV = ["aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)",
              "aiv_scalar_ratio", "aiv_mte2_time(us)", "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio"]
VENDOR_AIC = ["aic_time(us)", "aic_total_cycles", "aic_cube_time(us)", "aic_cube_ratio", "aic_scalar_time(us)",
              "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)", "aic_mte2_ratio",
              "aic_fixpipe_time(us)", "aic_fixpipe_ratio"]


def _read(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def test_the_seed_mse_calling_example_writes_one_op_summary_row_per_launch(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "acl_mse_loss_backward", os.path.join(ROOT, "examples", "acl_mse_loss_backward.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = str(tmp_path / "mse.csv")
    result = mod.main(["--csv", path])
    head, rows = _read(path)
    assert head[:len(VENDOR_OP_SUMMARY)] == VENDOR_OP_SUMMARY
    assert all(c in head for c in VENDOR_AIV)
    assert len(rows) == len(result["launch_records"]) == 1
    row = rows[0]
    assert row["Op Name"] == "MseLossGradV2" and row["Task Type"] == "AI_VECTOR_CORE"
    assert row["Block Dim"] == "1" and row["Mix Block Dim"] == "0"
    # the kernel reads grad_output, self and target and writes out: 2 x 4 fp32 each
    assert row["Input Shapes"] == "2,4;2,4;2,4" and row["Input Data Types"] == "FLOAT;FLOAT;FLOAT"
    assert row["Output Shapes"] == "2,4" and row["Output Data Types"] == "FLOAT"
    duration_us = result["cycles"] * 1e6 / opsim.device_spec("atlas-a2").clock_hz
    assert float(row["Task Duration(us)"]) == pytest.approx(duration_us, rel=1e-5)
    for name in ("pipe_utilization", "instr_exe", "code_exe"):
        assert os.path.exists(str(tmp_path / f"mse_{name}.csv"))


def test_a_default_embedding_call_has_one_op_summary_row_per_kernel_launch():
    op = registry.get("embedding_dense_backward")
    kw = op.example(np.random.default_rng(0), opsim.device_spec("atlas-a2"), "fp32")
    res = opsim.run("embedding_dense_backward", device="atlas-a2", **kw)
    head, rows = res.tables()["op_summary"]
    assert len(rows) == res.stats["launches"] == len(res.launch_records) > 1
    names = [r[head.index("Op Name")] for r in rows]
    assert names == [r.name for r in res.launch_records]
    starts = [r[head.index("Task Start Time(us)")] for r in rows]
    assert starts == sorted(starts)
    # the launches follow each other on one stream and together make the run
    total = sum(r[head.index("Task Duration(us)")] + r[head.index("Task Wait Time(us)")] for r in rows)
    assert total == pytest.approx(res.time_us, rel=1e-4)
    # the final kernel writes the [num_weights, dim] gradient
    out = res.outputs["out"]
    assert rows[-1][head.index("Output Shapes")] == ",".join(str(d) for d in out.shape)


def test_the_gap_between_back_to_back_launches_is_task_wait_time_not_task_duration(tmp_path):
    # the device file's launch.gap is the idle time msprof's task rows show between the tasks of
    # one call: op_summary once folded it into the second task's duration (wait time 0, its
    # bandwidths diluted) and the timeline drew the tasks back to back
    op = registry.get("embedding_dense_backward")
    spec = opsim.device_spec("atlas-a2")
    kw = op.example(np.random.default_rng(0), spec, "fp32")
    res = opsim.run("embedding_dense_backward", device="atlas-a2", **kw)
    head, rows = res.tables()["op_summary"]
    rows = [dict(zip(head, r)) for r in rows]
    assert len(rows) >= 2
    gap_us = spec.launch.gap * 1e6 / spec.clock_hz
    assert gap_us > 0
    assert rows[0]["Task Wait Time(us)"] == 0.0
    for prev, row in zip(rows, rows[1:]):
        assert row["Task Wait Time(us)"] == pytest.approx(gap_us, abs=1e-5)
        assert row["Task Start Time(us)"] == pytest.approx(
            prev["Task Start Time(us)"] + prev["Task Duration(us)"] + gap_us, abs=1e-5)
    # the run is its tasks and the gaps between them
    assert sum(r["Task Duration(us)"] + r["Task Wait Time(us)"] for r in rows) == pytest.approx(res.time_us,
                                                                                                  abs=1e-4)
    # the host rows of the timeline show the same gaps, and the trace gives the same table
    host = sorted((s.start, s.end) for s in res.trace.slices(process="host"))
    assert [b[0] - a[1] for a, b in zip(host, host[1:])] == [spec.launch.gap] * (len(host) - 1)
    res.trace.to_chrome_json(str(tmp_path / "t.json"))
    assert op_summary(records_from_trace(load_chrome(str(tmp_path / "t.json"))))[1] == \
        res.tables()["op_summary"][1]


def test_per_core_ratios_are_busy_cycles_over_block_cycles():
    rng = np.random.default_rng(1)
    x, y, g = (rng.standard_normal((64, 4096)).astype(np.float32) for _ in range(3))
    res = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, reduction="mean")
    head, rows = pipe_utilization(res.launch_records)
    assert head[:3] == ["Op Name", "block_id", "sub_block_id"]
    assert len(rows) == res.stats["block_dim"]
    per_core = res.stats["per_core"]
    for row in rows:
        r = dict(zip(head, row))
        core = r["sub_block_id"]
        assert r["aiv_mte2_ratio"] == pytest.approx(per_core[core]["MTE2"] / r["aiv_total_cycles"], rel=1e-5)
        assert 0 < r["aiv_vec_ratio"] < 1


def test_instruction_hot_spots_add_up_to_the_pipe_busy_cycles():
    rng = np.random.default_rng(2)
    x, y, g = (rng.standard_normal((8, 4096)).astype(np.float32) for _ in range(3))
    res = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, reduction="none")
    head, rows = instr_exe(res.launch_records)
    assert head[:7] == ["Op Name", "core", "instr", "pipe", "call_count", "cycles", "running_time(us)"]
    by: dict[tuple[str, str], int] = {}
    for r in rows:
        by[(r[1], r[3])] = by.get((r[1], r[3]), 0) + r[5]
    for core, busy in res.stats["per_core"].items():
        for pipe, cycles in busy.items():
            assert by.get((core, pipe), 0) == cycles
    assert [r[5] for r in rows] == sorted((r[5] for r in rows), reverse=True)   # hottest first
    copies = [r for r in rows if r[2].startswith("DataCopy") and r[3] == "MTE2"]
    assert sum(r[7] for r in copies) == res.stats["bytes_read"]


def test_code_hot_spots_name_kernel_source_lines_only_when_asked():
    rng = np.random.default_rng(3)
    x, y, g = (rng.standard_normal((8, 4096)).astype(np.float32) for _ in range(3))
    plain = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y)
    assert code_exe(plain.launch_records)[1] == []
    res = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, source_lines=True)
    head, rows = code_exe(res.launch_records)
    assert head[2:] == ["code", "call_count", "cycles", "running_time(us)"]
    assert rows and all(r[2].rsplit(":", 1)[1].isdigit() for r in rows)
    total = sum(r[4] for r in rows)
    assert total == sum(sum(b.values()) for b in res.stats["per_core"].values())
    # stamping source lines changes neither the cycles nor the bits
    assert res.cycles == plain.cycles
    assert np.array_equal(res.outputs["out"], plain.outputs["out"])


def test_a_mixed_launch_is_one_mix_aic_row_with_cube_and_vector_columns():
    op = registry.get("fused_linear_cross_entropy_loss_grad")
    kw = op.example(np.random.default_rng(0), opsim.device_spec("atlas-a2"), "bf16")
    res = opsim.run("fused_linear_cross_entropy_loss_grad", **kw)
    head, rows = op_summary(res.launch_records)
    assert all(c in head for c in VENDOR_AIC + VENDOR_AIV)
    mix = [dict(zip(head, r)) for r in rows if r[head.index("Task Type")] == "MIX_AIC"]
    assert len(mix) == 1
    assert mix[0]["Mix Block Dim"] == 2 * mix[0]["Block Dim"]
    assert 0 < mix[0]["aic_cube_ratio"] <= 1 and 0 < mix[0]["aiv_vec_ratio"] <= 1


@pytest.mark.parametrize("mode", ["memory_saving", "high_performance"])
def test_a_mixed_launch_lists_the_operators_tensors_and_not_its_workspace(mode):
    # FLCE hands its programs one dataclass of operands: the row once had empty shape columns
    op = registry.get("fused_linear_cross_entropy_loss_grad")
    kw = op.example(np.random.default_rng(0), opsim.device_spec("atlas-a2"), "fp16", mode=mode)
    res = opsim.run("fused_linear_cross_entropy_loss_grad", **kw)
    head, rows = res.tables()["op_summary"]
    row = dict(zip(head, rows[0]))
    bt, h = kw["input"].shape
    v = kw["weight"].shape[0]
    stats = ("logits_max", "sum_exp_logits") if mode == "memory_saving" else ("softmax",)
    ins = [kw[n] for n in ("grad", "target_mask", "masked_target", *stats, "input", "weight")]
    assert row["Input Shapes"] == ";".join(",".join(map(str, a.shape)) for a in ins)
    names = {"float32": "FLOAT", "float16": "FLOAT16", "bool": "BOOL", "int64": "INT64"}
    assert row["Input Data Types"] == ";".join(names[str(a.dtype)] for a in ins)
    assert row["Input Formats"] == ";".join("ND" for _ in ins)
    # the two gradients; the workspace (logit gradient in NZ, recomputed logits) is not listed
    assert row["Output Shapes"] == f"{bt},{h};{v},{h}"
    assert row["Output Data Types"] == "FLOAT16;FLOAT16" and row["Output Formats"] == "ND;ND"


def test_the_trace_gives_the_same_op_summary_and_per_core_tables(tmp_path):
    op = registry.get("embedding_dense_backward")
    kw = op.example(np.random.default_rng(0), opsim.device_spec("atlas-a2"), "fp32")
    res = opsim.run("embedding_dense_backward", device="atlas-a2", **kw)
    res.trace.to_chrome_json(str(tmp_path / "t.json"))
    back = records_from_trace(load_chrome(str(tmp_path / "t.json")))
    live = res.tables()
    assert op_summary(back)[1] == live["op_summary"][1]
    assert pipe_utilization(back)[1] == live["pipe_utilization"][1]


def test_cli_run_and_trace_summary_write_the_tables(tmp_path, capsys):
    trace = str(tmp_path / "mse.json")
    assert cli_main(["run", "mse_loss_backward", "--shape", "64x4096", "--trace", trace,
                     "--csv", str(tmp_path / "run.csv"), "--source-lines"]) == 0
    out = capsys.readouterr().out
    assert "HBM link" in out and "GM bandwidth" not in out
    assert cli_main(["trace", "summary", trace, "--csv", str(tmp_path / "tr.csv")]) == 0
    run_head, run_rows = _read(str(tmp_path / "run.csv"))
    tr_head, tr_rows = _read(str(tmp_path / "tr.csv"))
    assert run_head == tr_head and run_rows == tr_rows
    _, code = _read(str(tmp_path / "run_code_exe.csv"))
    assert code and code[0]["code"].endswith(tuple(f":{i}" for i in range(10000)))
    (tmp_path / "afile").write_text("")           # a missing directory is made; one under a file cannot be
    assert cli_main(["run", "mse_loss_backward", "--csv", str(tmp_path / "afile" / "dir.csv")]) == 2
    assert f"--csv {tmp_path / 'afile' / 'dir.csv'}: {tmp_path / 'afile'} is not a directory" in capsys.readouterr().err
    assert cli_main(["run", "mse_loss_backward", "--mode", "estimate", "--csv", str(tmp_path / "e.csv")]) == 2
    assert "launches no kernels" in capsys.readouterr().err and not os.path.exists(str(tmp_path / "e.csv"))


def test_write_tables_names_the_files_beside_the_op_summary(tmp_path):
    rng = np.random.default_rng(4)
    x, y, g = (rng.standard_normal((4, 64)).astype(np.float32) for _ in range(3))
    res = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y)
    files = write_tables(res.launch_records, str(tmp_path / "p.csv"))
    assert files == {"op_summary": str(tmp_path / "p.csv"),
                     "pipe_utilization": str(tmp_path / "p_pipe_utilization.csv"),
                     "instr_exe": str(tmp_path / "p_instr_exe.csv"),
                     "code_exe": str(tmp_path / "p_code_exe.csv")}


def _example_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "acl_mse_loss_backward_mod", os.path.join(ROOT, "examples", "acl_mse_loss_backward.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _three_synchronized_calls(rt):
    from opsim.kernels.aclnn import aclnnMseLossBackward, aclnnMseLossBackwardGetWorkspaceSize
    ex = _example_module()
    assert rt.aclInit(None) == 0 and rt.aclrtSetDevice(0) == 0
    stream, ret = rt.aclrtCreateStream()
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    tensors = [ex.create_tensor(rt, a)[1] for a in (x, x * 2, x * 0, np.zeros_like(x))]
    for _ in range(3):
        ws, executor, ret = aclnnMseLossBackwardGetWorkspaceSize(*tensors[:3], 1, tensors[3])
        assert ret == 0 and ws == 0
        assert aclnnMseLossBackward(0, 0, executor, stream) == 0
        assert rt.aclrtSynchronizeStream(stream) == 0      # prunes the finished launch
    return stream


def test_a_profiling_runtime_keeps_every_launch_in_its_tables_across_synchronizations(tmp_path):
    from opsim.simulator.acl import AclRuntime
    rt = AclRuntime("atlas-a2", profile=True)
    _three_synchronized_calls(rt)
    assert rt.device.launches == []                       # the runtime's memory stays flat ...
    records = rt.launch_records()                         # ... but the profile keeps the records
    assert [r.name for r in records] == ["MseLossGradV2"] * 3
    assert rt.write_tables(str(tmp_path / "t.csv")) == 0
    head, rows = _read(str(tmp_path / "t.csv"))
    assert len(rows) == 3 and all(r["Op Name"] == "MseLossGradV2" for r in rows)


def test_tables_of_a_runtime_that_was_not_profiling_are_refused_with_a_code(tmp_path):
    from opsim.simulator.acl import ACL_ERROR_INVALID_PARAM, AclRuntime
    rt = AclRuntime("atlas-a2")
    _three_synchronized_calls(rt)
    assert rt.write_tables(str(tmp_path / "t.csv")) == ACL_ERROR_INVALID_PARAM
    assert "profile=True" in rt.aclGetRecentErrMsg()
    assert not os.path.exists(str(tmp_path / "t.csv"))


def test_stores_a_write_back_l2_takes_are_l2_write_bw_not_main_mem_write_bw():
    # every store of MSE's output stays in atlas-a2's write-back L2 (192 MiB): op_summary once
    # showed main_mem_write_bw 0.0 and had no column for the 512 KiB the L2 took
    rng = np.random.default_rng(1)
    x, y, g = (rng.standard_normal((64, 4096)).astype(np.float32) for _ in range(3))
    spec = opsim.device_spec("atlas-a2")
    assert spec.l2.write_policy == "write-back"
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y,
                    reduction="mean")
    head, rows = res.tables()["op_summary"]
    assert "l2_write_bw(GB/s)" in head, head[-4:]
    row = dict(zip(head, rows[0]))
    seconds = float(row["Task Duration(us)"]) * 1e-6
    out_bytes = 64 * 4096 * 4                          # the one fp32 output, stored once
    assert row["main_mem_write_bw(GB/s)"] == 0.0
    assert row["l2_write_bw(GB/s)"] == pytest.approx(out_bytes / seconds / 1e9, rel=1e-4)
    # on the L2 link, within what the cores that ran can write to it
    cores = len(res.launch_records[0].core_cycles)
    assert row["l2_write_bw(GB/s)"] <= spec.l2.write_rate * cores * spec.clock_hz / 1e9
    assert row["l2_write_bw(GB/s)"] + row["l2_read_bw(GB/s)"] <= spec.l2.bandwidth / 1e9


def test_stores_a_write_through_part_makes_stay_on_the_gm_link():
    # without a write-back L2 every store is an HBM write: l2_write_bw counts only the L2 link's
    rng = np.random.default_rng(1)
    x, y, g = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(3))
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y,
                    reduction="mean", device_overrides={"l2.write_policy": "write-through"})
    head, rows = res.tables()["op_summary"]
    row = dict(zip(head, rows[0]))
    seconds = float(row["Task Duration(us)"]) * 1e-6
    assert row["l2_write_bw(GB/s)"] == 0.0
    assert row["main_mem_write_bw(GB/s)"] == pytest.approx(64 * 256 * 4 / seconds / 1e9, rel=1e-4)


def test_cli_run_refuses_csv_of_a_mode_without_launches_before_running(tmp_path, capsys):
    # `opsim run … --mode estimate --csv F` ran, printed its result on stdout and only then said
    # "a estimate-mode run launches no kernels" with status 2, where `--trace` in the same mode
    # is refused before the run
    for mode, article in (("estimate", "an"), ("numeric", "a")):
        assert cli_main(["run", "mse_loss_backward", "--shape", "64x256", "--mode", mode,
                         "--csv", str(tmp_path / "e.csv")]) == 2
        captured = capsys.readouterr()
        assert captured.out == "", captured.out
        assert captured.err == (f"opsim: --csv {tmp_path / 'e.csv'}: {article} {mode}-mode run launches no "
                                f"kernels, so there is no op_summary; use --mode full or timing\n"), captured.err
    # an empty call launches nothing either, in any mode: said after the run, as before
    assert cli_main(["run", "mse_loss_backward", "--shape", "0", "--csv", str(tmp_path / "e.csv")]) == 2
    assert "the call launched no kernels (an empty call)" in capsys.readouterr().err


L2_COLUMNS = ("l2_read_bw(GB/s)", "l2_write_bw(GB/s)")


@pytest.mark.parametrize("device, dtype", [("mt7004", np.float32), ("mt7004", np.float16), ("ft78ne", np.float32)])
def test_a_dsp_launch_shows_its_l2_bandwidths_as_na_not_zero(device, dtype, tmp_path):
    # the DSPs have no L2 in the model: op_summary said l2_read_bw 0.0 and l2_write_bw 0.0, a
    # measurement of a link that does not exist; msprof shows N/A for a metric the chip lacks
    assert opsim.device_spec(device).l2 is None
    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 0.9, 256).astype(dtype)
    res = opsim.run("binarycrossentropygrad", device=device, input_x=x, input_y=x[::-1].copy(), weight=None,
                    dloss=np.ones(1, dtype), reduction=1, trace="instruction")
    path = str(tmp_path / "t.json")
    res.trace.to_chrome_json(path)
    for records in (res.launch_records, records_from_trace(load_chrome(path))):
        head, rows = op_summary(list(records), "DDR")
        assert rows
        for r in rows:
            row = dict(zip(head, r))
            assert [row[c] for c in L2_COLUMNS] == ["N/A", "N/A"], row
            assert row["main_mem_read_bw(GB/s)"] > 0          # the DDR link's figures stay numbers
    # as written by `opsim run --csv`
    assert cli_main(["run", "binarycrossentropygrad", "--device", device, "--shape", "256",
                     "--csv", str(tmp_path / "s.csv")]) == 0
    with open(tmp_path / "s.csv", newline="") as fh:
        written = list(csv.DictReader(fh))
    assert written and all(r[c] == "N/A" for r in written for c in L2_COLUMNS)


def test_an_ascend_launch_read_back_from_its_trace_keeps_its_l2_bandwidths(tmp_path):
    rng = np.random.default_rng(4)
    x, y, g = (rng.standard_normal((64, 4096)).astype(np.float32) for _ in range(3))
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y, reduction="mean")
    path = str(tmp_path / "t.json")
    res.trace.to_chrome_json(path)
    for records in (res.launch_records, records_from_trace(load_chrome(path))):
        head, rows = op_summary(list(records), "HBM")
        row = dict(zip(head, rows[0]))
        assert isinstance(row["l2_read_bw(GB/s)"], float) and row["l2_write_bw(GB/s)"] > 0
