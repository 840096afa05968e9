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


def _spec_value_cells(text, field):
    """The value and kind cells of ``field``'s row in the report's provenance table."""
    m = re.search(rf"<td[^>]*>{re.escape(field)}</td><td[^>]*>([^<]*)</td><td[^>]*>([^<]*)</td>", text)
    assert m, field
    return m.group(1), m.group(2)


def test_report_of_a_what_if_run_shows_the_device_it_ran_on(tmp_path):
    # write_report(res) without spec= showed the catalogue atlas-a2 (gm.bandwidth 1.3824e+12,
    # its source) for a run with device_overrides={"gm.bandwidth": 5e11}, under a heading that
    # promises "the what-if override that changed it"
    import numpy as np
    x = np.ones(4096, np.float32)
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, trace="off",
                    device_overrides={"gm.bandwidth": 5e11})
    text = open(write_report(res, str(tmp_path / "r.html")), encoding="utf-8").read()
    value, kind = _spec_value_cells(text, "gm.bandwidth")
    assert float(value) == 5e11 and kind == "override", (value, kind)


def test_report_of_a_device_file_run_shows_its_spec(tmp_path):
    # opsim run --device my.toml --report: the report looked the device up by its name in the
    # catalogue, found nothing and left the device table out
    from opsim.cli import main
    src = open(devices.load("atlas-a2").origin, encoding="utf-8").read()
    dev = tmp_path / "mine.toml"
    dev.write_text(src.replace('name = "atlas-a2"', 'name = "mine-a2"').replace("value = 196608,", "value = 131072,", 1))
    rc = main(["run", "mse_loss_backward", "--device", str(dev), "--shape", "4096", "--mode", "timing",
               "--report", str(tmp_path / "r.html")])
    assert rc == 0
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Device spec and provenance" in text
    assert _spec_value_cells(text, "ub.size")[0] == "131072"


def test_a_result_carrying_its_spec_still_pickles(tmp_path):
    # results cross process pools (opsim demo's workers): the spec a result now carries, with its
    # read-only mapping views, must pickle and come back equal, overrides and provenance included
    import pickle
    import numpy as np
    x = np.ones(256, np.float32)
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, device_overrides={"ub.size": 131072})
    back = pickle.loads(pickle.dumps(res))
    assert back.spec == res.spec and back.spec.ub.size == 131072
    assert back.spec.provenance["ub.size"].kind == "override" and back.spec.raw == res.spec.raw
    assert back.cycles == res.cycles and np.array_equal(back.outputs["out"], res.outputs["out"])
