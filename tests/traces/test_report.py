"""The HTML report is one self-contained file with the summary, pictures, tiling and spec."""
from __future__ import annotations

import base64
import re
from xml.etree import ElementTree

import pytest

from opsim import devices
import opsim
from opsim.traces.report import write_index, write_report


@pytest.fixture(scope="module")
def report_html(mse_runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "r.html"
    assert write_report(mse_runs["instruction"], str(path)) == str(path)
    return path.read_text(encoding="utf-8")


def test_report_needs_no_network_and_inlines_four_svg_pictures(report_html):
    assert not re.search(r'(src|href)\s*=\s*"(?!data:|#)', report_html)   # nothing to fetch
    assert "http://" not in report_html and "https://" not in report_html
    pics = re.findall(r'<img alt="(\w+)" src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', report_html)
    assert [k for k, _ in pics] == ["timeline", "bandwidth", "utilisation", "roofline"]
    for _, b in pics:
        root = ElementTree.fromstring(base64.b64decode(b))          # well-formed XML
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        # nothing fetched from inside the picture either (the namespace URI is not a fetch)
        assert not re.search(rb'(href|src)\s*=', base64.b64decode(b))


def test_report_shows_verdict_summary_tiling_and_the_device_spec_with_provenance(mse_runs, report_html):
    res = mse_runs["instruction"]
    assert f"{res.cycles} cycles" in report_html and "memory bound" in report_html
    for fragment in ("Busy % of the run per core and pipe", "Links: achieved vs peak", "Tiling",
                     "tile_length", "Device spec and provenance", "ub.size", "INI:Ascend910B2",
                     "assumption", "mse_loss_backward on atlas-a2", "UB / local memory peak"):
        assert fragment in report_html, fragment
    rows = devices.report.provenance_rows(devices.load("atlas-a2"))
    assert report_html.count('<td class="l kind-') == len(rows)


def test_report_of_a_run_without_a_trace_still_has_the_statistics(tmp_path):
    import numpy as np
    x = np.ones(256, np.float32)
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, reduction="sum", trace="off")
    text = open(write_report(res, str(tmp_path / "r.html")), encoding="utf-8").read()
    assert "No trace was recorded" in text and "Run statistics" in text and "<img" not in text


def test_index_links_every_report_and_trace(tmp_path):
    entries = [{"op": "mse_loss_backward", "device": "atlas-a2", "dtype": "fp32", "cycles": 10,
                "time_us": 0.1, "bound": "memory", "check": "exact", "report": "a.html", "trace": "a.json"},
               {"op": "binary_cross_entropy_backward", "device": "atlas-a3", "dtype": "bf16", "cycles": 20,
                "time_us": 0.2, "bound": "vector", "check": "ok", "report": "b.html", "trace": "b.json"}]
    text = open(write_index(entries, str(tmp_path / "index.html")), encoding="utf-8").read()
    assert re.findall(r'href="([^"]+)"', text) == ["data:,", "a.html", "a.json", "b.html", "b.json"]
    assert "binary_cross_entropy_backward" in text and "2 runs" in text
