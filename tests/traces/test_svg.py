"""The report's SVG pictures show what the matplotlib pictures show, drawn from the same trace."""
from __future__ import annotations

import re
from xml.etree import ElementTree

import numpy as np
import pytest

from opsim.traces import svg
from opsim.traces.layout import PIPES
from opsim.traces.plots import plot

NS = "{http://www.w3.org/2000/svg}"


def _root(pic):
    return ElementTree.fromstring(pic.svg)


@pytest.mark.parametrize("kind", svg.KINDS)
def test_every_picture_is_well_formed_svg_with_a_size(mse_runs, kind):
    root = _root(svg.picture(mse_runs["instruction"].trace, kind))
    assert root.tag == f"{NS}svg"
    assert float(root.get("width")) > 100 and float(root.get("height")) > 100


def test_timeline_has_the_rows_and_slices_of_the_matplotlib_timeline(mse_runs):
    tr = mse_runs["tile"].trace
    pic = svg.timeline(tr)
    ref = plot(tr, "timeline")
    assert pic.info["rows"] == ref.info["rows"]
    assert pic.info["bars"] == ref.info["bars"] == sum(1 for s in tr.slices() if s.thread in PIPES)
    # few bars per row: each is drawn on its own (white edges), none merged
    bars = [r for r in _root(pic).iter(f"{NS}rect") if r.get("stroke") == "#ffffff"]
    assert len(bars) == pic.info["drawn"] == pic.info["bars"]


def test_timeline_window_selects_what_the_matplotlib_window_selects(mse_runs):
    tr = mse_runs["instruction"].trace
    assert svg.timeline(tr, window=(1.0, 2.0)).info["bars"] == plot(tr, "timeline", window=(1.0, 2.0)).info["bars"]
    with pytest.raises(ValueError, match="end > start"):
        svg.timeline(tr, window=(2.0, 1.0))


def test_bars_closer_than_half_a_pixel_merge_and_distant_ones_do_not():
    x0 = np.array([0.0, 10.2, 10.6, 30.0])
    x1 = np.array([10.0, 10.5, 20.0, 31.0])
    assert svg._merge(x0, x1, 0.5) == [(0.0, 20.0), (30.0, 31.0)]
    assert svg._merge(x0, x1, 0.0) == list(zip(x0.tolist(), x1.tolist()))
    # a long bar covering later short ones keeps them inside it
    assert svg._merge(np.array([0.0, 2.0, 50.0]), np.array([40.0, 3.0, 60.0]), 0.5) == [(0.0, 40.0), (50.0, 60.0)]


def test_bandwidth_draws_every_link_counter_with_its_capacity(mse_runs):
    tr = mse_runs["instruction"].trace
    pic = svg.bandwidth(tr)
    ref = plot(tr, "bandwidth")
    assert pic.info == ref.info
    assert len(list(_root(pic).iter(f"{NS}polyline"))) == len(pic.info["links"]) + (pic.info["l2_points"] > 0)
    for name in pic.info["links"]:      # a link with a counter series gets its peak line
        assert f"{name} peak {pic.info['capacity_GBps'][name]:g} GB/s" in pic.svg


def test_utilisation_shows_the_busy_matrix_of_the_summary(mse_runs):
    tr = mse_runs["instruction"].trace
    pic = svg.utilisation(tr)
    ref = plot(tr, "utilisation")
    assert pic.info["cores"] == ref.info["cores"] and pic.info["pipes"] == ref.info["pipes"]
    np.testing.assert_array_equal(pic.info["busy_pct"], ref.info["busy_pct"])
    shown = re.findall(r'text-anchor="middle" fill="#(?:ffffff|000000)" font-weight="normal">(\d+)<', pic.svg)
    m = pic.info["busy_pct"]
    assert shown == [f"{v:.0f}" for v in m[~np.isnan(m)]]


def test_roofline_point_is_the_matplotlib_point_and_under_the_roof(mse_runs):
    tr = mse_runs["instruction"].trace
    pic = svg.roofline(tr)
    ref = plot(tr, "roofline")
    assert pic.info == ref.info
    x, y = pic.info["point"]
    assert 0 < y <= pic.info["roof_at_point"]


def test_roofline_places_the_run_by_its_l2_bytes_as_the_matplotlib_picture_does(mse_runs):
    # docs/profiling.md: the L2 roof is drawn dashed, with the run placed a second time by its
    # operations per L2-served byte; the SVG drew the roof but not the point (MSE on atlas-a2:
    # its stores go to the write-back L2)
    tr = mse_runs["instruction"].trace
    r = tr.summary().roofline
    assert r.l2_bytes > 0
    pic, ref = svg.roofline(tr), plot(tr, "roofline")
    points = pic.info["points"]
    assert [p.link for p in points] == ["HBM", "L2"] and points == ref.info["points"]
    l2 = points[1]
    assert l2.intensity == pytest.approx(r.ops / r.l2_bytes) and 0 < l2.ops_per_s <= l2.roof
    rings = [c for c in _root(pic).iter(f"{NS}circle") if c.get("fill") == "none" and c.get("r") == "5"]
    dots = [c for c in _root(pic).iter(f"{NS}circle") if c.get("r") == "5.5"]
    assert len(rings) == len(dots) == 1 and rings[0].get("cy") == dots[0].get("cy")     # same ops/s
    assert "this run per L2-served byte" in pic.svg
    # the PNG draws the same two markers: one filled, one hollow
    marked = [ln for ln in ref.figure.axes[0].lines if ln.get_marker() == "o"]
    assert sorted(ln.get_xdata()[0] for ln in marked) == sorted(p.intensity for p in points)


def test_unknown_kind_is_refused_with_the_allowed_ones(mse_runs):
    with pytest.raises(ValueError, match="timeline, bandwidth, utilisation, roofline"):
        svg.picture(mse_runs["tile"].trace, "pie")
