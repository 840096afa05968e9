"""opsim.sweep writes only where asked, replaces only its own databases, detects an edited study,
reports a damaged database clearly, and leaves no worker processes when it is killed."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opsim.sweep import StudyError, sweep

ROOT = Path(__file__).resolve().parents[2]


def study(name="files", **meta):
    return {"study": {"name": name, "mode": "estimate", **meta},
            "axes": {"device": ["atlas-a2"], "operator": ["mse_loss_backward"], "shape": [[4096]],
                     "dtype": ["fp32", "fp16"]}}


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory with a sibling directory the study must never reach."""
    (tmp_path / "work").mkdir()
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def _tree(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_study_naming_an_absolute_path_outside_the_working_directory_is_refused(work):
    target = work / "outside" / "x.sqlite"
    with pytest.raises(StudyError, match="study.database.*relative path inside the working directory"):
        sweep(study(database=str(target)), workers=1, quiet=True)
    assert not target.exists()
    target.write_bytes(b"precious data")
    with pytest.raises(StudyError):
        sweep(study(database=str(target)), workers=1, quiet=True, overwrite=True)
    assert target.read_bytes() == b"precious data"


def test_a_study_naming_a_parent_directory_path_is_refused_and_writes_nothing(work):
    before = _tree(work)
    for db in ("../x.sqlite", "sub/../../outside/x.sqlite"):
        with pytest.raises(StudyError, match="no '..'"):
            sweep(study(database=db), workers=1, quiet=True, overwrite=True)
    assert _tree(work) == before


def test_a_study_database_through_a_symlink_out_of_the_working_directory_is_refused(work):
    (work / "work" / "link").symlink_to(work / "outside")
    with pytest.raises(StudyError, match="leads outside the working directory"):
        sweep(study(database="link/x.sqlite"), workers=1, quiet=True)
    assert list((work / "outside").iterdir()) == []


def test_a_study_name_with_path_parts_becomes_a_plain_file_name_in_the_working_directory(work):
    res = sweep(study(name="../../outside/evil"), workers=1, quiet=True)
    assert res.path.parent == Path(".") and "/" not in res.path.name and not res.path.name.startswith(".")
    assert (work / "work" / res.path).exists()
    assert list((work / "outside").iterdir()) == []


def test_a_relative_study_database_goes_into_the_working_directory(work):
    res = sweep(study(database="results/f.sqlite"), workers=1, quiet=True)
    assert (work / "work" / "results" / "f.sqlite").exists()
    assert len(res.rows()) == 2


@pytest.mark.parametrize("content", [b"precious data, not a database\n" * 10, "sqlite"])
def test_overwrite_never_replaces_an_unrelated_file(work, content):
    target = work / "work" / "notes.sqlite"
    if content == "sqlite":   # an SQLite database of another program
        conn = sqlite3.connect(str(target))
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (42)")
        conn.commit()
        conn.close()
    else:
        target.write_bytes(content)
    before = target.read_bytes()
    for kw in ({"overwrite": True}, {"resume": True}, {}):
        with pytest.raises(StudyError, match="opsim (did not create|neither writes)|not an SQLite"):
            sweep(study(), target, workers=1, quiet=True, **kw)
        assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["notes.sqlite"]


def test_overwrite_replaces_only_a_database_of_the_same_study(work):
    db = work / "work" / "a.sqlite"
    sweep(study(name="alpha"), db, workers=1, quiet=True)
    before = db.read_bytes()
    with pytest.raises(StudyError, match="holds the results of study 'alpha', not 'beta'"):
        sweep(study(name="beta"), db, workers=1, quiet=True, overwrite=True)
    assert db.read_bytes() == before
    again = sweep(study(name="alpha"), db, workers=1, quiet=True, overwrite=True)
    assert again.ran == 2 and len(again.rows()) == 2


def test_an_edited_study_is_detected_on_resume_and_nothing_is_mixed(work):
    db = work / "work" / "e.sqlite"
    sweep(study(), db, workers=1, quiet=True)
    edited = study()
    edited["axes"]["shape"] = [[8192]]
    with pytest.raises(StudyError, match="has changed since its 2 rows were written"):
        sweep(edited, db, workers=1, quiet=True, resume=True)
    conn = sqlite3.connect(str(db))
    assert conn.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 2
    conn.close()
    other_mode = study()
    with pytest.raises(StudyError, match="has changed"):
        sweep(other_mode, db, workers=1, quiet=True, resume=True, mode="timing")
    # the unchanged study resumes: nothing to run
    assert sweep(study(), db, workers=1, quiet=True, resume=True).skipped == 2


def test_an_edited_study_file_is_detected_by_the_cli(work):
    path = work / "work" / "s.toml"
    text = ('[study]\nname = "cli"\n[axes]\noperator = ["mse_loss_backward"]\n'
            'shape = [[4096]]\ndtype = ["fp32", "fp16"]\n')
    path.write_text(text)
    run = lambda *a: subprocess.run([sys.executable, "-m", "opsim", "sweep", str(path), "--quiet",
                                     "--workers", "1", *a], capture_output=True, text=True, timeout=120,
                                    cwd=work / "work")
    assert run().returncode == 0
    path.write_text(text.replace('"fp16"]', '"fp16", "bf16"]'))
    res = run("--resume")
    assert res.returncode == 2 and "has changed" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("damage", ["garbage after the header", "truncated"])
def test_a_damaged_database_gives_a_clear_error_not_a_traceback(work, damage):
    db = work / "work" / "d.sqlite"
    sweep(study(), db, workers=1, quiet=True)
    data = db.read_bytes()
    if damage == "truncated":
        db.write_bytes(data[:100])
    else:
        db.write_bytes(data[:16] + os.urandom(len(data) - 16))
    path = work / "work" / "files.toml"
    path.write_text('[axes]\ndevice = ["atlas-a2"]\noperator = ["mse_loss_backward"]\nshape = [[4096]]\n'
                    'dtype = ["fp32", "fp16"]\n')
    res = subprocess.run([sys.executable, "-m", "opsim", "sweep", str(path), "--db", str(db), "--resume"],
                         capture_output=True, text=True, timeout=60, cwd=work / "work")
    assert res.returncode == 2 and "not a usable opsim sweep database" in res.stderr
    assert "Traceback" not in res.stderr and "DatabaseError" not in res.stderr
    with pytest.raises(StudyError, match="not a usable opsim sweep database"):
        sweep(study(), db, workers=1, quiet=True, resume=True)


def test_a_study_too_large_to_enumerate_is_refused_up_front(work):
    huge = study()
    huge["axes"]["tiling"] = {f"f{i}": list(range(100)) for i in range(5)}   # 2 * 10^10 points
    with pytest.raises(StudyError, match=r"20000000000 points .* at most 1000000 allowed"):
        sweep(huge, workers=1, quiet=True)
    assert list((work / "work").iterdir()) == []


# -- processes ---------------------------------------------------------------------------------

KILL_STUDY = """
[study]
name = "orphans"
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


def _children(pid):
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _rows(db):
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the workers")
def test_five_sigkills_mid_sweep_leave_no_worker_processes(tmp_path):
    path = tmp_path / "kill.toml"
    path.write_text(KILL_STUDY)
    db = tmp_path / "k.sqlite"
    for round_ in range(5):
        args = [sys.executable, "-m", "opsim", "sweep", str(path), "--db", str(db), "--quiet",
                "--workers", "2", "--resume"]
        proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start, workers = _rows(db), []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) >= 2 and _rows(db) >= start + 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"round {round_}: the sweep ended before it could be killed"
        workers = _children(proc.pid)
        assert workers, "the sweep runs its points in worker processes"
        os.kill(proc.pid, signal.SIGKILL)     # only the sweep itself; its workers must follow
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [w for w in workers if _alive(w)]
        for w in left:   # do not leave them behind even if the test fails
            os.kill(w, signal.SIGKILL)
        assert left == [], f"round {round_}: workers {left} outlived the killed sweep"
    assert 0 < _rows(db) < 200


@pytest.mark.parametrize("kw, needle", [({"workers": 100_000}, "workers must be an integer from 1 to 1024"),
                                        ({"workers": 0}, "workers must be"),
                                        ({"confirm_top": -3}, "confirm_top=-3 must be an integer >= 0")])
def test_implausible_worker_counts_and_confirmations_are_refused_before_anything_runs(work, kw, needle):
    with pytest.raises(StudyError, match=needle):
        sweep(study(), quiet=True, **kw)
    assert list((work / "work").iterdir()) == []


def test_a_csv_path_that_cannot_be_written_is_a_clear_error_and_the_rows_stay_in_the_database(work, capsys):
    from opsim.cli import main
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "csvfail"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'shape = [[4096]]\ndtype = ["fp32", "fp16"]\n')
    (work / "work" / "afile").write_text("")
    rc = main(["sweep", str(path), "--quiet", "--executor", "serial", "--csv", "afile/rows.csv"])
    err = capsys.readouterr().err
    assert rc == 2 and "--csv afile/rows.csv: Not a directory" in err and "csvfail.sqlite" in err
    assert sweep(str(path), "csvfail.sqlite", workers=1, quiet=True, resume=True).skipped == 2


def test_a_csv_in_a_missing_directory_is_written_with_its_directories(work, capsys):
    # --db new/dir/x.sqlite made its directories, --csv new/dir/rows.csv failed after the sweep
    # with "No such file or directory"
    from opsim.cli import main
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "csvdirs"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'shape = [[4096]]\ndtype = ["fp32", "fp16"]\n')
    rc = main(["sweep", str(path), "--quiet", "--executor", "serial", "--db", "out/db/s.sqlite",
               "--csv", "out/csv/rows.csv"])
    assert rc == 0, capsys.readouterr().err
    lines = (work / "work" / "out" / "csv" / "rows.csv").read_text().splitlines()
    assert len(lines) == 3 and (work / "work" / "out" / "db" / "s.sqlite").is_file()


def test_the_fastest_point_of_a_study_with_an_empty_shape_is_not_none_bound(work, capsys):
    # an empty point has no bound: the summary printed "(0 cycles, None-bound)"
    from opsim.cli import main
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "empty"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'shape = [[0], [4096]]\n')
    assert main(["sweep", str(path), "--quiet", "--executor", "serial"]) == 0
    out = capsys.readouterr().out
    assert "(0 cycles, empty: nothing launched)" in out and "None" not in out


def _fastest_line(capsys):
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("fastest:"))


def test_the_fastest_point_names_only_the_study_axes_as_the_user_writes_them(work, capsys):
    # a study without a dtype axis printed "dtype null", and every value as JSON: shape [4096],
    # dtype "fp16", tiling {} overrides {} attrs {"reduction":"none"}
    from opsim.cli import main
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "nodtype"\nmode = "estimate"\n[axes]\noperator = ["binarycrossentropygrad"]\n'
                    'device = ["ft78ne"]\nshape = [[64, 64]]\nattr.reduction = ["none"]\n')
    assert main(["sweep", str(path), "--quiet", "--executor", "serial"]) == 0
    line = _fastest_line(capsys)
    assert line.endswith(" at binarycrossentropygrad on ft78ne: shape 64x64, attr.reduction none"), line
    for absent in ("null", "dtype", "tiling", "overrides", "{", "["):
        assert absent not in line, line


def test_the_fastest_point_shows_a_dtype_and_tiling_axis_as_values(work, capsys):
    from opsim.cli import main
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "tiled"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'shape = [[4096]]\ndtype = ["fp16"]\ntiling.block_dim = [4]\noverride.ub.size = [131072]\n')
    assert main(["sweep", str(path), "--quiet", "--executor", "serial"]) == 0
    line = _fastest_line(capsys)
    assert line.endswith(" at mse_loss_backward on atlas-a2: shape 4096, dtype fp16, tiling.block_dim 4, "
                         "override.ub.size 131072"), line


def test_a_study_shape_gives_the_required_inputs_and_leaves_the_optional_operands_out(work):
    # documented in README's Studies section and in the DSP example: a BCE study's points run
    # without weight (opsim run --shape gives one), a table of shapes can give it
    import opsim
    readme = (ROOT / "README.md").read_text()
    studies = readme[readme.index("### Studies"):readme.index("### Traces")]
    assert "every required input" in studies and "optional operands" in studies and "weight" in studies
    example = (ROOT / "examples" / "studies" / "dsp_core_mask_scaling.toml").read_text()
    assert "without weight" in example.split("[study]")[0]
    n, ts = 4096, opsim.TensorSpec
    axes = {"operator": ["binarycrossentropygrad"], "device": ["ft78ne"], "attr": {"reduction": ["none"]}}
    by_shape = sweep({"study": {"name": "plain", "mode": "estimate"}, "axes": {**axes, "shape": [[n]]}},
                     "plain.sqlite", workers=1, quiet=True)
    table = {name: [n] for name in ("input_x", "input_y", "dloss", "weight")}
    by_table = sweep({"study": {"name": "weighted", "mode": "estimate"}, "axes": {**axes, "shape": [table]}},
                     "weighted.sqlite", workers=1, quiet=True)
    call = {name: ts((n,), "fp32") for name in ("input_x", "input_y", "dloss")}
    plain = opsim.run("binarycrossentropygrad", device="ft78ne", mode="estimate", reduction="none", **call)
    weighted = opsim.run("binarycrossentropygrad", device="ft78ne", mode="estimate", reduction="none",
                         weight=ts((n,), "fp32"), **call)
    assert plain.cycles != weighted.cycles
    assert [r["cycles"] for r in by_shape.rows()] == [plain.cycles]
    assert [r["cycles"] for r in by_table.rows()] == [weighted.cycles]


@pytest.mark.parametrize("args, python, cli", [
    (["--confirm-top", "-1"], "confirm_top=-1 must be an integer >= 0", "--confirm-top -1 must be an integer >= 0"),
    (["--mode", "timing", "--confirm-top", "2"], "confirm_top=2 needs the study in estimate mode",
     "--confirm-top 2 needs the study in estimate mode")])
def test_confirmation_errors_name_the_option_as_the_caller_spells_it(work, capsys, args, python, cli):
    # `opsim sweep --confirm-top -1` said "confirm_top must be ...", the keyword of sweep(), not
    # the flag the user typed
    from opsim.cli import main
    top = int(args[-1])
    with pytest.raises(StudyError, match=python):
        sweep(study(), quiet=True, confirm_top=top, mode="timing" if "timing" in args else None)
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "ct"\nmode = "estimate"\n[axes]\noperator = ["mse_loss_backward"]\n'
                    'shape = [[4096]]\n')
    rc = main(["sweep", str(path), "--quiet", *args])
    err = capsys.readouterr().err
    assert rc == 2 and cli in err and "confirm_top" not in err, err
    assert sorted(p.name for p in (work / "work").iterdir()) == ["s.toml"]


def test_resume_refuses_a_study_whose_device_file_has_changed(work):
    # the rows of a device file's points were kept by --resume after the file was edited (HBM
    # cut from 691 to 100 GB/s: the stale row said 155,951 cycles, the device now gives 910,468)
    from opsim.devices import load
    src = open(load("atlas-a2").origin, encoding="utf-8").read()
    dev = work / "work" / "dev.toml"
    dev.write_text(src.replace('name = "atlas-a2"', 'name = "dev"'))
    st = {"study": {"name": "devfile", "mode": "estimate"},
          "axes": {"device": ["dev.toml"], "operator": ["mse_loss_backward"], "shape": [[65536]]}}
    first = sweep(st, quiet=True, executor="serial")
    assert first.ran == 1
    (old,) = [r["cycles"] for r in first.rows()]
    assert sweep(st, quiet=True, executor="serial", resume=True).skipped == 1   # unchanged: resumed
    dev.write_text(dev.read_text().replace("value = 1.3824e12,", "value = 1e11,"))
    with pytest.raises(StudyError, match="device file dev.toml of study 'devfile' has changed since its 1 rows were written"):
        sweep(st, quiet=True, executor="serial", resume=True)
    again = sweep(st, quiet=True, executor="serial", overwrite=True)
    assert again.ran == 1 and again.rows()[0]["cycles"] > old


def test_a_mode_override_of_a_study_with_a_mode_axis_is_refused_not_ignored(work, capsys):
    # `opsim sweep s.toml --mode full` on a study with mode = ["estimate", "timing"] as an axis ran
    # the axis's modes and said nothing: the option, which --help calls "override the study's
    # mode", was dropped
    from opsim.cli import main
    st = {"study": {"name": "modeaxis"}, "axes": {"mode": ["estimate", "timing"],
                                                  "operator": ["mse_loss_backward"], "shape": [[4096]]}}
    with pytest.raises(StudyError, match="mode=full would be ignored: the study has a mode axis"):
        sweep(st, quiet=True, mode="full")
    path = work / "work" / "s.toml"
    path.write_text('[study]\nname = "modeaxis"\n[axes]\nmode = ["estimate", "timing"]\n'
                    'operator = ["mse_loss_backward"]\nshape = [[4096]]\n')
    rc = main(["sweep", str(path), "--quiet", "--mode", "full"])
    err = capsys.readouterr().err
    assert rc == 2 and "--mode full would be ignored: the study has a mode axis (estimate, timing)" in err, err
    assert sorted(p.name for p in (work / "work").iterdir()) == ["s.toml"]
    assert sweep(st, quiet=True).points == 2     # without the option it runs its axis
