"""opsim.sweep: studies, the SQLite rows, resume after SIGKILL, executors, confirmation, plots."""
from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import opsim
from opsim.sweep import StudyError, canonical_params, load_study, point_id, sweep

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "examples" / "studies"
# measured columns: everything but the wall-clock time of a point
VOLATILE = {"wall_s"}


def small_study(**axes_extra):
    axes = {"device": ["atlas-a2", "atlas-a3"], "operator": ["mse_loss_backward"], "shape": [[131072]],
            "dtype": ["fp32", "fp16"], "tiling": {"block_dim": [4, 16], "tile_length": [1024, 8192]}}
    axes.update(axes_extra)
    return {"study": {"name": "small", "mode": "estimate"}, "axes": axes}


def _values(rows):
    return {r["id"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "opsim.cli_study", *args], capture_output=True, text=True,
                          cwd=kw.pop("cwd", ROOT), timeout=kw.pop("timeout", 120), **kw)


def _cli_in_process(capsys, *args):
    """The CLI's exit status and stderr, run in this process: the same entry point as ``_cli``
    without a Python start-up and import of opsim (~0.5 s) per call. An exception that escaped
    the CLI would fail the test here as its traceback would show in ``_cli``'s stderr; the
    subprocess path itself is covered by the tests that still use ``_cli``."""
    from opsim import cli_study
    capsys.readouterr()
    code = cli_study.main(list(args))
    return code, capsys.readouterr().err


# -- study files --------------------------------------------------------------------------------

def test_point_identity_is_a_stable_hash_of_the_canonical_parameters():
    st = load_study(small_study())
    pts = list(st.points())
    ids = [point_id(canonical_params(st, p["axes"])) for p in pts]
    assert len(set(ids)) == len(pts) == st.size == 2 * 2 * 2 * 2
    # the same point written in another order of axes has the same identity
    reordered = {"study": {"name": "other", "mode": "estimate"},
                 "axes": {"tiling": {"tile_length": [1024, 8192], "block_dim": [4, 16]},
                          "dtype": ["fp32", "fp16"], "shape": [[131072]], "operator": ["mse_loss_backward"],
                          "device": ["atlas-a2", "atlas-a3"]}}
    st2 = load_study(reordered)
    assert {point_id(canonical_params(st2, p["axes"])) for p in st2.points()} == set(ids)


BAD_STUDIES = {
    "unknown operator": ('[axes]\ndevice = ["atlas-a2"]\noperator = ["mse_loss_backwards"]\n',
                         "axes.operator", 3, "unknown operator"),
    "unknown device field": ('[axes]\noperator = ["mse_loss_backward"]\ndevice = ["atlas-a2"]\n'
                             'override."ub.sise" = [1024]\n', "axes.override.ub.sise", 4, "unknown field"),
    "empty axis": ('[study]\nname = "x"\n\n[axes]\noperator = ["mse_loss_backward"]\n'
                   'tiling.block_dim = []\n', "axes.tiling.block_dim", 6, "empty axis"),
    "malformed TOML": ('[axes]\noperator = ["mse_loss_backward"\ndevice = ["atlas-a2"]\n', None, 3,
                       "malformed TOML"),
    "unknown axis": ('[axes]\noperator = ["mse_loss_backward"]\ncolour = ["red"]\n', "axes.colour", 3,
                     "unknown axis"),
    # every point failed with numpy's 'expected non-negative integer'
    "negative seed": ('[study]\nseed = -5\n\n[axes]\noperator = ["mse_loss_backward"]\n', "study.seed", 2,
                      "integer >= 0"),
    # a plot of a text column ended in a traceback under --plot, of an unknown one in an empty picture
    "plot value not a number": ('[axes]\noperator = ["mse_loss_backward"]\nshape = [[16], [32]]\n\n'
                                '[[plot]]\nkind = "lines"\nx = "shape"\nvalue = "bound"\n', "plot.value", 8,
                                "not a numeric result column"),
    "plot value unknown": ('[axes]\noperator = ["mse_loss_backward"]\nshape = [[16], [32]]\n\n'
                           '[[plot]]\nkind = "lines"\nx = "shape"\nvalue = "time"\n', "plot.value", 8,
                           "not a numeric result column"),
    # a misspelt attribute or tiling key ran every point into the same refusal, exit status 0
    "attribute no operator takes": ('[axes]\noperator = ["mse_loss_backward", "binary_cross_entropy_backward"]\n'
                                    'attr.reductio = ["mean"]\n', "axes.attr.reductio", 3,
                                    "takes the attribute 'reductio' (did you mean 'reduction'?); allowed: reduction"),
    "tiling key no operator takes": ('[axes]\noperator = ["mse_loss_backward"]\ntiling.blockdim = [4, 8]\n',
                                     "axes.tiling.blockdim", 3,
                                     "takes the tiling override 'blockdim' (did you mean 'block_dim'?); allowed: "
                                     "block_dim, buffer_num, core_mask, tile_length"),
    # the dtype's allowed names were dropped
    "unknown dtype": ('[axes]\noperator = ["mse_loss_backward"]\ndtype = ["fp23"]\n', "axes.dtype", 3,
                      "unknown dtype 'fp23'; allowed names: fp32"),
    # a device file that cannot be read: a traceback with an override axis (its fields are checked
    # against each device), one refusal per point without
    "device file missing, override axis": ('[axes]\noperator = ["mse_loss_backward"]\ndevice = ["atlas-a2", '
                                           '"no-such-device.toml"]\nshape = [[64]]\noverride."ub.size" = [131072]\n',
                                           "axes.device", 3, "cannot read device file"),
    "device file missing": ('[axes]\noperator = ["mse_loss_backward"]\ndevice = ["no-such-device.toml"]\n'
                            'shape = [[64]]\n', "axes.device", 3, "cannot read device file"),
    "plot key unknown": ('[axes]\noperator = ["mse_loss_backward"]\nshape = [[16], [32]]\n\n'
                         '[[plot]]\nkind = "lines"\nx = "shape"\nseires = "device"\n', "plot.seires", 8,
                         "unknown key"),
}


@pytest.mark.parametrize("case", sorted(BAD_STUDIES))
def test_bad_study_is_refused_naming_key_and_line_and_nothing_is_written(tmp_path, capsys, case):
    text, key, line, what = BAD_STUDIES[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    db = tmp_path / "out.sqlite"
    with pytest.raises(StudyError) as exc:
        sweep(path, db)
    msg = str(exc.value)
    assert what in msg
    assert f"line {line}" in msg or f"bad.toml:{line}:" in msg, msg
    if key:
        assert f"'{key}'" in msg
    assert not db.exists()
    code, err = _cli_in_process(capsys, "sweep", str(path), "--db", str(db), "--quiet")
    assert code == 2
    assert what in err and "Traceback" not in err
    assert not db.exists() and list(tmp_path.iterdir()) == [path]


def test_a_study_that_gives_no_shape_is_refused_not_run_into_one_refusal_per_point(tmp_path):
    # every point failed alike with "OpError: gradOutput is a null pointer; it is required", and
    # the sweep ended with status 0
    path = tmp_path / "noshape.toml"
    path.write_text('[study]\nname = "x"\n\n[axes]\noperator = ["mse_loss_backward"]\ndevice = ["atlas-a2"]\n')
    db = tmp_path / "out.sqlite"
    with pytest.raises(StudyError) as exc:
        sweep(path, db)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:4: key 'axes': ") and "no shape axis" in msg and "[operands." in msg, msg
    assert not db.exists()
    res = _cli("sweep", str(path), "--db", str(db), "--quiet")
    assert res.returncode == 2 and "no shape axis" in res.stderr and "Traceback" not in res.stderr
    # shapes from [operands.NAME] tables alone are a study
    path.write_text(path.read_text() + "\n".join(f'[operands.{n}]\nshape = [64]' for n in
                                                   ("grad_output", "self", "target")) + "\n")
    assert sweep(path, db, workers=1, quiet=True).failed == 0


def test_every_builtin_operator_declares_the_tiling_keys_its_plan_accepts():
    # the study check reads OpDef.tiling_keys; the plan's own refusal lists what it accepts
    import numpy as np
    import opsim
    from opsim import devices
    from opsim.kernels import registry
    for name in registry.names():
        op = registry.get(name)
        device = "ft78ne" if name == "binarycrossentropygrad" else "atlas-a2"
        ex = op.example(np.random.default_rng(0), devices.load(device), op.dtypes(devices.load(device))[0])
        with pytest.raises(opsim.OpError) as exc:
            opsim.run(name, device=device, mode="estimate", tiling={"zz_not_a_key": 1}, **ex)
        assert op.tiling_keys is not None, name
        assert exc.value.message.endswith("allowed: " + ", ".join(op.tiling_keys)), (name, exc.value.message)


def test_operand_tables_do_not_rename_the_study(tmp_path):
    # the study's name (and so its default database) is its own, not its last [operands.X] table's
    named = {"study": {"name": "emb"}, "axes": {"operator": ["embedding_dense_backward"], "shape": [[64]]},
             "operands": {"indices": {"dtype": "int64"}}}
    assert load_study(named).name == "emb"
    path = tmp_path / "fixed_operands.toml"
    path.write_text('[axes]\noperator = ["embedding_dense_backward"]\nshape = [[64]]\n\n'
                    '[operands.indices]\ndtype = "int64"\n')
    assert load_study(path).name == "fixed_operands"


# -- rows -----------------------------------------------------------------------------------------

def test_a_scheduler_without_the_dask_executor_is_refused_not_ignored(tmp_path):
    db = tmp_path / "s.sqlite"
    with pytest.raises(StudyError, match="scheduler 'tcp://127.0.0.1:1' is for executor 'dask', not 'local'"):
        sweep(small_study(), db, scheduler="tcp://127.0.0.1:1", quiet=True)
    with pytest.raises(StudyError, match="executor 'threads' is not one of local, serial, dask"):
        sweep(small_study(), db, executor="threads", quiet=True)
    assert not db.exists(), "refused before the database is made"
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "s"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'device = ["atlas-a2"]\nshape = [[1024]]\n')
    r = _cli("sweep", str(toml), "--db", str(db), "--scheduler", "tcp://127.0.0.1:1")
    assert r.returncode == 2 and "--executor dask" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("address,advice", [("tcp://127.0.0.1:1", "check that `dask scheduler` is running"),
                                            ("nonsense", "give it as tcp://HOST:PORT")])
def test_an_unreachable_dask_scheduler_is_a_one_line_error_naming_the_option_and_address(tmp_path, address,
                                                                                          advice):
    pytest.importorskip("distributed")
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "s"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'device = ["atlas-a2"]\nshape = [[1024]]\n')
    # dask's connect timeout (30 s by default) through its environment configuration
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "0.2s"}
    r = _cli("sweep", str(toml), "--db", str(tmp_path / "s.sqlite"), "--executor", "dask",
             "--scheduler", address, env=env)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"opsim sweep: --scheduler {address}: cannot reach a dask scheduler")
    assert advice in lines[0]


def test_an_operands_table_naming_no_operand_of_the_operator_fails_its_points(tmp_path):
    study = {"study": {"name": "ops", "mode": "estimate"},
             "axes": {"operator": ["mse_loss_backward"], "device": ["atlas-a2"], "shape": [[1024]]},
             "operands": {"grad_outptu": {"dtype": "fp16"}}}
    rows = sweep(study, tmp_path / "o.sqlite", workers=1, quiet=True).rows()
    assert [r["status"] for r in rows] == ["error"]
    assert "has no operand 'grad_outptu'" in rows[0]["error"] and "grad_output" in rows[0]["error"]


def test_sweep_records_one_row_per_point_and_the_refusals_of_infeasible_tilings(tmp_path):
    res = opsim.sweep(small_study(), tmp_path / "s.sqlite", workers=1, quiet=True)
    rows = res.rows()
    assert len(rows) == res.points == res.ran == 16
    ok = [r for r in rows if r["status"] == "ok"]
    bad = [r for r in rows if r["status"] != "ok"]
    # fp32 tiles of 8192 elements need 32 B x 8192 = 256 KiB of UB with double buffering
    assert bad and all(r["error_code"] == 561002 and "does not fit the UB" in r["error"] for r in bad)
    assert all(r["axis:tiling.tile_length"] == 8192 for r in bad)
    for r in ok:
        assert r["cycles"] > 0 and r["time_us"] > 0 and r["bound"] == "memory"
        assert r["bytes"] == r["bytes_read"] + r["bytes_written"] > 0
        assert r["ub_bytes"] <= 196608 and r["util_MTE2"] > 0 and r["bandwidth_GBps"] > 0
        assert r["tile_length"] == r["axis:tiling.tile_length"] and r["block_dim"] == r["axis:tiling.block_dim"]
    # a point's row is the same as a direct run of the same parameters
    r = ok[0]
    direct = opsim.run("mse_loss_backward", device=r["device"], mode="estimate",
                       tiling={"block_dim": r["block_dim"], "tile_length": r["tile_length"]},
                       **{n: opsim.TensorSpec((131072,), r["axis:dtype"]) for n in ("grad_output", "self", "target")})
    assert direct.cycles == r["cycles"]


def test_resume_skips_points_done_and_an_existing_database_is_not_overwritten_silently(tmp_path):
    db = tmp_path / "s.sqlite"
    first = sweep(small_study(), db, workers=1, quiet=True)
    again = sweep(small_study(), db, resume=True, workers=1, quiet=True)
    assert (again.ran, again.skipped) == (0, first.points)
    with pytest.raises(StudyError, match="resume=True"):
        sweep(small_study(), db, workers=1, quiet=True)
    fresh = sweep(small_study(), db, overwrite=True, workers=1, quiet=True)
    assert fresh.ran == first.points and len(fresh.rows()) == first.points


def test_resume_and_overwrite_together_are_refused_before_the_database_is_touched(tmp_path):
    # both were taken and the sweep resumed, the --overwrite dropped in silence
    db = tmp_path / "s.sqlite"
    first = sweep(small_study(), db, workers=1, quiet=True)
    before = db.read_bytes()
    with pytest.raises(StudyError, match="resume and overwrite exclude each other"):
        sweep(small_study(), db, resume=True, overwrite=True, workers=1, quiet=True)
    assert db.read_bytes() == before and first.points == 16
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "s"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'device = ["atlas-a2"]\nshape = [[1024]]\n')
    r = _cli("sweep", str(toml), "--db", str(tmp_path / "t.sqlite"), "--resume", "--overwrite")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--resume" in r.stderr and "--overwrite" in r.stderr and not (tmp_path / "t.sqlite").exists()


def test_an_existing_database_names_the_flags_on_the_command_line_and_the_keywords_in_python(tmp_path):
    # the CLI said "resume=True (--resume) to continue it or overwrite=True (--overwrite)"
    toml = tmp_path / "s.toml"
    toml.write_text('[study]\nname = "s"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'device = ["atlas-a2"]\nshape = [[1024]]\n')
    db = tmp_path / "t.sqlite"
    assert _cli("sweep", str(toml), "--db", str(db), "--quiet").returncode == 0
    r = _cli("sweep", str(toml), "--db", str(db), "--quiet")
    assert r.returncode == 2 and r.stderr == (f"opsim sweep: {db} already holds results; --resume continues it, "
                                              f"--overwrite starts it again\n"), r.stderr
    with pytest.raises(StudyError) as info:
        sweep(str(toml), db, workers=1, quiet=True)
    assert str(info.value) == f"{db} already holds results; resume=True continues it, overwrite=True starts it again"
    r = _cli("sweep", str(toml), "--db", str(db), "--scheduler", "tcp://127.0.0.1:1")
    assert r.returncode == 2 and "add --executor dask or leave" in r.stderr and "executor='dask'" not in r.stderr


def test_csv_export_and_dataframe(tmp_path):
    res = sweep(small_study(), tmp_path / "s.sqlite", workers=1, quiet=True)
    path = res.to_csv(tmp_path / "s.csv")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == res.points
    assert {"id", "device", "axis:tiling.block_dim", "status", "cycles", "time_us", "util_MTE2",
            "bound", "error"} <= set(rows[0])
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pandas"):
            res.to_dataframe()
    else:
        df = res.to_dataframe()
        assert len(df) == res.points and "cycles" in df.columns



def test_csv_cells_hold_strings_bare_and_only_lists_and_dicts_as_json(tmp_path):
    # the dtype column read '"fp32"' (the database's JSON) next to axis:dtype's fp32, and a point
    # without a dtype read 'null' where every other missing value is an empty cell
    res = sweep(small_study(), tmp_path / "s.sqlite", workers=1, quiet=True)
    with res.to_csv(tmp_path / "s.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    db = {r["id"]: r for r in res.rows()}
    assert {r["dtype"] for r in rows} == {"fp32", "fp16"}
    for r in rows:
        assert r["dtype"] == r["axis:dtype"] == json.loads(db[r["id"]]["dtype"])
        # lists and dicts stay JSON and read back to the database's values
        for col in ("shape", "tiling", "overrides", "attrs", "params"):
            assert json.loads(r[col]) == json.loads(db[r["id"]][col]), col
        assert json.loads(r["params"])["dtype"] == r["dtype"]
        assert json.loads(r["tiling"])["block_dim"] == int(r["axis:tiling.block_dim"])
    study = {"study": {"name": "nd", "mode": "estimate"},
             "axes": {"device": ["atlas-a2"], "operator": ["mse_loss_backward"], "shape": [[4096]]}}
    nd = sweep(study, tmp_path / "nd.sqlite", workers=1, quiet=True)
    assert nd.rows()[0]["dtype"] == "null"
    with nd.to_csv(tmp_path / "nd.csv").open(newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["dtype"] == "" and row["error"] == "" and json.loads(row["params"])["dtype"] is None

# -- interruption -----------------------------------------------------------------------------------

KILL_STUDY = """
[study]
name = "kill-resume"
mode = "timing"
[axes]
device = ["atlas-a2", "atlas-a3"]
operator = ["mse_loss_backward"]
shape = [[16384]]
dtype = ["fp32", "fp16"]
tiling.block_dim = [1, 2, 4, 8, 16]
tiling.tile_length = [512, 1024, 2048, 4096, 8192]
tiling.buffer_num = [1, 2]
"""


def _rows(db):
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM points").fetchone()
    except sqlite3.OperationalError:
        return (0, 0)
    finally:
        conn.close()


@pytest.mark.slow
def test_a_200_point_sweep_killed_with_sigkill_and_resumed_has_one_row_per_point_and_the_same_values(tmp_path):
    study = tmp_path / "kill.toml"
    study.write_text(KILL_STUDY)
    assert load_study(study).size == 200
    db = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "opsim.cli_study", "sweep", str(study), "--db", str(db),
                             "--quiet", "--workers", "2"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while _rows(db)[0] < 30 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)   # the CLI and its worker processes, mid-sweep
    finally:
        proc.wait(timeout=30)
    done_before = _rows(db)[0]
    assert 30 <= done_before < 200
    res = _cli("sweep", str(study), "--db", str(db), "--resume", "--quiet", "--workers", "2")
    assert res.returncode == 0, res.stderr
    assert f"skipped {done_before}" in res.stdout
    assert _rows(db) == (200, 200)
    from opsim.sweep import open_results
    clean = sweep(study, tmp_path / "clean.sqlite", workers=2, quiet=True)
    assert _values(open_results(db).rows()) == _values(clean.rows())


# -- executors ---------------------------------------------------------------------------------------

def test_dask_local_cluster_gives_the_same_rows_as_local_worker_processes(tmp_path):
    import distributed
    study = small_study(shape=[[65536], [100000]])
    local = sweep(study, tmp_path / "local.sqlite", workers=2, quiet=True)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        on_dask = sweep(study, tmp_path / "dask.sqlite", executor="dask", scheduler=client, quiet=True)
    assert on_dask.ran == local.ran == 32
    assert _values(on_dask.rows()) == _values(local.rows())


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    study = small_study(shape=[[65536], [3, 5]], tiling={"block_dim": [4]})
    study["axes"]["attr"] = {"reduction": ["mean", "average"]}
    res = sweep(study, tmp_path / "f.sqlite", workers=2, quiet=True)
    rows = res.rows()
    assert len(rows) == res.points == 16
    bad = [r for r in rows if r["axis:attr.reduction"] == "average"]
    assert bad and all(r["status"] == "error" and r["error_code"] == 161002 and "reduction" in r["error"]
                       for r in bad)
    assert all(r["status"] == "ok" for r in rows if r["axis:attr.reduction"] == "mean")


CRASHING_OPERATOR = """
import os
import opsim
import opsim.asc as asc

TILE = 1024


@asc.jit
def crash_op(x: asc.GlobalAddress, y: asc.GlobalAddress, block_length: int):
    xg, yg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x, block_length)
    yg.set_global_buffer(y, block_length)
    pipe = asc.TPipe()
    q = asc.TQue(asc.TPosition.VECIN, 1)
    pipe.init_buffer(q, 1, TILE * 4)
    for i in range(block_length // TILE):
        t = q.alloc_tensor(x.dtype)
        asc.data_copy(t, xg[i * TILE:], TILE)
        q.enque(t)
        t = q.deque(x.dtype)
        asc.data_copy(yg[i * TILE:], t, TILE)
        q.free_tensor(t)


def tiling(spec, inputs, attrs):
    if inputs["x"].numel == 3 * TILE:
        os._exit(9)      # the worker dies: the OOM killer, a crash in native code
    return {"block_dim": 1, "block_length": inputs["x"].numel}


opsim.register_operator(crash_op, inputs=("x",), outputs=("y",), tiling=tiling, example_shape=(TILE,))
"""


def test_a_point_that_kills_its_worker_process_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    # the study loads the file here too: its operator must vanish after the test, or the demo of
    # every operator (tests/opsim/test_cli.py, the same worker process) runs it
    from opsim.kernels import registry
    registry.names()                                       # the built-ins are in before the copy
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FILES", dict(registry._FILES))
    op = tmp_path / "crash_op.py"
    op.write_text(CRASHING_OPERATOR)
    study = {"study": {"name": "crash"},
             "axes": {"operator": [f"{op}:crash_op"], "shape": [[k * 1024] for k in range(1, 7)]}}
    # (with workers=1 the points run in this process, which such a point takes down with it)
    res = sweep(study, tmp_path / "c.sqlite", workers=2, batch=2, quiet=True)
    rows = res.rows()
    assert len(rows) == res.points == res.ran == 6 and res.failed == 1
    died = [r for r in rows if r["status"] != "ok"]
    assert [r["idx"] for r in died] == [2] and "worker process" in died[0]["error"]


# -- confirmation and plots -----------------------------------------------------------------------

def test_confirm_top_runs_the_simulator_on_the_best_points_and_records_the_estimate_error(tmp_path):
    study = small_study(shape=[[262144]], tiling={"block_dim": [8, 16, 48], "tile_length": [2048, 4096]})
    res = sweep(study, tmp_path / "c.sqlite", workers=1, quiet=True, confirm_top=3)
    rows = res.rows()
    confirmed = [r for r in rows if r["confirmed_cycles"] is not None]
    assert res.confirmed == len(confirmed) == 3
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: (r["time_us"], r["idx"]))
    assert {r["id"] for r in confirmed} == {r["id"] for r in ok[:3]}
    for r in confirmed:
        des = opsim.run("mse_loss_backward", device=r["device"], mode="timing", trace="off",
                        tiling={"block_dim": r["block_dim"], "tile_length": r["tile_length"]},
                        **{n: opsim.TensorSpec((262144,), r["axis:dtype"]) for n in ("grad_output", "self", "target")})
        assert r["confirmed_cycles"] == des.cycles
        assert r["estimate_error"] == pytest.approx((r["cycles"] - des.cycles) / des.cycles)
        assert abs(r["estimate_error"]) < 0.10


def test_plot_dir_gets_a_heat_map_and_scaling_lines(tmp_path):
    study = small_study()
    study["plot"] = [{"kind": "heatmap", "x": "tiling.tile_length", "y": "tiling.block_dim"},
                     {"kind": "lines", "x": "tiling.block_dim", "series": "device"}]
    res = sweep(study, tmp_path / "p.sqlite", workers=1, quiet=True, plot_dir=tmp_path / "plots")
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert len(pngs) == 3   # one heat map per device, one picture of lines
    assert any("heatmap" in p.name for p in pngs) and any("lines" in p.name for p in pngs)
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert res.points == 16


def test_cli_an_unwritable_plot_dir_is_a_usage_error_naming_it_after_the_rows_are_safe(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    plots = blocker / "plots"      # a directory under a regular file cannot be made
    study = tmp_path / "s.toml"
    study.write_text('[axes]\noperator = ["mse_loss_backward"]\nshape = [[1024], [2048]]\n')
    res = _cli("sweep", str(study), "--db", str(tmp_path / "s.sqlite"), "--workers", "1",
               "--csv", str(tmp_path / "s.csv"), "--plot", str(plots))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"--plot {plots}: Not a directory" in res.stderr and "s.sqlite" in res.stderr, res.stderr
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 3    # the CSV export still happened


def test_cli_is_silent_off_a_terminal_and_prints_a_summary(tmp_path):
    res = _cli("sweep", str(STUDIES / "elementwise_tiling_a2_a3.toml"), "--db", str(tmp_path / "e.sqlite"),
               "--workers", "2", "--csv", str(tmp_path / "e.csv"))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""                       # no progress bar when stderr is not a terminal
    assert "240 points, 240 rows" in res.stdout and "fastest:" in res.stdout
    assert len((tmp_path / "e.csv").read_text().splitlines()) == 241


# -- the example studies ------------------------------------------------------------------------------

def test_elementwise_example_study_runs_in_estimate_mode(tmp_path):
    res = sweep(STUDIES / "elementwise_tiling_a2_a3.toml", tmp_path / "e.sqlite", workers=2, quiet=True)
    rows = res.rows()
    assert len(rows) == res.points == 240
    assert all(r["status"] == "ok" or r["error_code"] == 561002 for r in rows)
    best = {}
    for r in rows:
        if r["status"] == "ok":
            key = (r["device"], r["operator"], r["axis:dtype"])
            best[key] = min(best.get(key, float("inf")), r["time_us"])
    # more cores are faster: the best of each group uses more than one core
    for key, t in best.items():
        one_core = min(r["time_us"] for r in rows if r["status"] == "ok" and r["block_dim"] == 1
                       and (r["device"], r["operator"], r["axis:dtype"]) == key)
        assert t < one_core / 4


OTHER_STUDIES = sorted(p.name for p in STUDIES.glob("*.toml") if p.name != "elementwise_tiling_a2_a3.toml")


def test_there_are_example_studies_for_dsp_scaling_and_embedding_capacity():
    assert {"dsp_core_mask_scaling.toml", "embedding_capacity_ub.toml"} <= set(OTHER_STUDIES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n == "flce_vocab_capacity.toml" else ())
                                  for n in OTHER_STUDIES])
def test_every_example_study_runs_in_estimate_mode(tmp_path, name):
    res = sweep(STUDIES / name, tmp_path / "x.sqlite", workers=2, quiet=True)
    rows = res.rows()
    assert len(rows) == res.points > 0
    # every point either ran or was refused with the operator's status code and a message
    # (aclnn codes on Ascend, the DSP library's negative codes on a DSP)
    assert all(r["status"] == "ok" or (isinstance(r["error_code"], int) and r["error_code"] != 0
                                       and r["error"]) for r in rows)
    assert any(r["status"] == "ok" for r in rows)


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written to it."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


def test_on_a_terminal_without_tqdm_the_sweep_still_shows_points_done_and_failed(tmp_path, monkeypatch):
    # tqdm is an optional extra (not in `.[dev]`): without it a sweep on a terminal showed
    # nothing at all until its summary, though `--quiet` promises to turn a progress bar off
    monkeypatch.setitem(sys.modules, "tqdm", None)         # `from tqdm import tqdm` raises
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    study = small_study(shape=[[65536]], tiling={"block_dim": [4]})
    study["axes"]["attr"] = {"reduction": ["mean", "average"]}
    res = sweep(study, tmp_path / "t.sqlite", executor="serial")
    assert res.points == 8 and res.failed == 4
    last = term.text.rstrip("\r ").split("\r")[-1].strip()
    assert "8/8 points" in last and "4 failed" in last, repr(term.text)
    assert term.text.endswith("\r")                        # the line is cleared for the summary
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    sweep(study, tmp_path / "q.sqlite", executor="serial", quiet=True)
    assert quiet.text == ""


def test_a_machine_fault_is_recorded_with_its_type_named_once(tmp_path):
    # a point whose operands do not fit a what-if HBM was recorded as "CapacityError:
    # CapacityError: mse_loss_backward needs ...": the fault's own message starts with its type
    st = {"study": {"name": "fault", "mode": "timing"},
          "axes": {"operator": ["mse_loss_backward"], "shape": [[65536]],
                   "override": {"gm.capacity": [65536]}}}
    res = sweep(st, tmp_path / "f.sqlite", executor="serial", quiet=True)
    (row,) = res.rows()
    assert row["status"] == "error"
    assert row["error"].startswith("CapacityError: mse_loss_backward needs 1048576 B of HBM"), row["error"]
    assert row["error"].count("CapacityError") == 1
