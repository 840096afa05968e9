"""Pictures are drawn from the trace and checked structurally against it."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.traces.layout import PIPES
from opsim.traces.plots import KINDS, plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _bars(fig) -> int:
    ax = fig.axes[0]
    return sum(len(c.get_paths()) for c in ax.collections)


def test_timeline_at_tile_level_has_one_bar_per_pipe_slice_and_one_row_per_core_pipe(mse_runs, tmp_path):
    tr = mse_runs["tile"].trace
    path = tmp_path / "timeline.png"
    pic = plot(tr, "timeline", str(path))
    pipe_slices = [s for s in tr.slices() if s.thread in PIPES]
    assert pic.info["bars"] == len(pipe_slices) == _bars(pic.figure) == 4 * 3 * 4
    assert pic.info["rows"] == [f"{c} {p}" for c in ("core0.veccore0", "core0.veccore1", "core1.veccore0",
                                                     "core1.veccore1") for p in ("MTE2", "VECTOR", "MTE3")]
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_timeline_window_keeps_only_the_slices_it_overlaps(mse_runs):
    tr = mse_runs["instruction"].trace
    us = 1e6 / tr.clock_hz
    lo, hi = 1.0, 2.0
    inside = [s for s in tr.slices() if s.thread in PIPES and s.end * us >= lo - 1e-3 and s.start * us <= hi + 1e-3]
    pic = plot(tr, "timeline", window=(lo, hi))
    assert 0 < pic.info["bars"] < sum(1 for s in tr.slices() if s.thread in PIPES)
    assert abs(pic.info["bars"] - len(inside)) <= 2      # slices touching the edges within 1 ns
    assert pic.figure.axes[0].get_xlim() == (lo, hi)
    with pytest.raises(ValueError, match="end > start"):
        plot(tr, "timeline", window=(2.0, 1.0))


def test_roofline_places_the_run_under_the_roof(mse_runs, tmp_path):
    tr = mse_runs["instruction"].trace
    pic = plot(tr, "roofline", str(tmp_path / "roof.png"))
    x, y = pic.info["point"]
    assert 0 < y <= pic.info["roof_at_point"]
    assert pic.info["roof_at_point"] == pytest.approx(min(pic.info["peak_ops_per_s"],
                                                          x * pic.info["peak_bytes_per_s"]))
    # the marker drawn is that point (in G element-ops/s)
    line = next(l for l in pic.figure.axes[0].get_lines() if l.get_label().startswith("this run:"))
    assert line.get_xdata()[0] == pytest.approx(x) and line.get_ydata()[0] == pytest.approx(y / 1e9)


def test_bandwidth_plot_draws_each_link_counter_against_its_capacity(mse_runs):
    tr = mse_runs["instruction"].trace
    pic = plot(tr, "bandwidth")
    points = {}
    for _, name, _, _ in tr.counters():
        if name.endswith(" GB/s"):
            points[name[:-5]] = points.get(name[:-5], 0) + 1
    assert pic.info["links"] == points and "HBM" in points
    dashed = [l.get_ydata()[0] for l in pic.figure.axes[0].get_lines() if l.get_linestyle() == "--"]
    assert pytest.approx(1382.4) in dashed
    assert pic.info["l2_points"] > 0


def test_utilisation_heat_map_is_the_summary_busy_matrix(mse_runs):
    tr = mse_runs["instruction"].trace
    pic = plot(tr, "utilisation")
    s = tr.summary()
    m = pic.info["busy_pct"]
    for u in s.pipes:
        assert m[pic.info["cores"].index(u.core), pic.info["pipes"].index(u.pipe)] == pytest.approx(u.busy_pct)
    image = pic.figure.axes[0].images[0].get_array()
    assert np.allclose(np.ma.filled(image, np.nan), m, equal_nan=True)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_draws_even_a_launch_level_trace(mse_runs, kind, tmp_path):
    path = tmp_path / f"{kind}.png"
    plot(mse_runs["launch"].trace, kind, str(path))
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_unknown_kind_is_refused_with_the_allowed_ones(mse_runs):
    with pytest.raises(ValueError, match="timeline, bandwidth, utilisation, roofline"):
        plot(mse_runs["tile"].trace, "gantt")
