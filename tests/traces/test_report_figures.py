"""Every figure the summary, the report and the op_summary table show agrees with the run's own
statistics, at every trace level: a level that does not record a figure leaves it out rather
than showing 0."""
from __future__ import annotations

import re

import numpy as np
import pytest

import opsim
from opsim import devices
from opsim.kernels import registry
from opsim.traces.loader import load_chrome
from opsim.traces.report import write_report


def _example_run(op: str, device: str, dtype: str, level: str):
    kwargs = registry.get(op).example(np.random.default_rng(0), devices.load(device), dtype)
    return opsim.run(op, device=device, trace=level, **kwargs)


def _from_file(res, tmp_path):
    path = tmp_path / "t.json"
    res.trace.to_chrome_json(str(path))
    return load_chrome(str(path)).summary()


def _report_text(res, tmp_path) -> str:
    path = tmp_path / "r.html"
    write_report(res, str(path))
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("op,device,dtype", [("mse_loss_backward", "atlas-a2", "fp32"),
                                             ("binarycrossentropygrad", "ft78ne", "fp32")])
@pytest.mark.parametrize("level", ["launch", "tile", "instruction"])
def test_the_ub_peak_of_summary_and_report_is_the_runs_at_every_level(op, device, dtype, level, tmp_path):
    # a launch-level trace has no occupancy counters, and a DSP library's work area is bump
    # allocated outside the region's allocator: both once showed "UB peak 0 B"
    res = _example_run(op, device, dtype, level)
    peak = res.stats["ub_peak_bytes"]
    assert peak > 0
    assert res.trace.summary().ub_peak_bytes == peak
    assert _from_file(res, tmp_path).ub_peak_bytes == peak
    text = _report_text(res, tmp_path)
    assert f"UB / local memory peak {peak} B" in text


def test_a_trace_that_does_not_record_the_ub_peak_shows_no_ub_row(tmp_path):
    # a launch-level trace written without the run's own count (an older opsim, the acl runtime)
    res = _example_run("mse_loss_backward", "atlas-a2", "fp32", "launch")
    del res.trace.metadata["local_peak_bytes"]
    assert res.trace.summary().ub_peak_bytes is None
    text = _report_text(res, tmp_path)
    assert "UB / local memory peak" not in text and "UB peak" not in res.trace.summary().table()
