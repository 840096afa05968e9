"""The opsim command line."""
from __future__ import annotations

import json

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
