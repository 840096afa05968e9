"""The HTML report renders in a real headless Chromium: no console errors, pictures decode,
the screenshot is not blank. Skips only when no Chromium binary is installed."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from opsim.traces.report import write_index, write_report

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH "
                                "(Debian: apt-get install -y chromium)")

# flags for a sandboxless headless run on a machine without network or GPU
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium(page: str, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(os.listdir(tmp_path))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, f"file://{page}"],
                          capture_output=True, text=True, timeout=120)


def render(page: str, tmp_path) -> tuple[str, list[str], np.ndarray]:
    """(DOM after load, console messages, screenshot pixels) of ``page``."""
    dom = _chromium(page, tmp_path, "--virtual-time-budget=5000", "--dump-dom")
    shot = tmp_path / "shot.png"
    snap = _chromium(page, tmp_path, "--window-size=1280,1600", f"--screenshot={shot}")
    console = [line for out in (dom.stderr, snap.stderr) for line in out.splitlines() if ":CONSOLE" in line]
    from matplotlib.image import imread
    return dom.stdout, console, imread(str(shot))


@pytest.fixture(scope="module")
def report_page(mse_runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("browser") / "report.html"
    write_report(mse_runs["instruction"], str(path))
    return str(path)


def test_report_loads_without_console_errors_with_all_pictures_and_a_non_blank_screenshot(report_page, tmp_path):
    dom, console, pixels = render(report_page, tmp_path)
    assert console == []
    assert 'data-images-loaded="4/4"' in dom                   # every inline picture (SVG) decoded
    assert "memory bound" in dom and "Device spec and provenance" in dom
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1200
    assert float(pixels[..., :3].std()) > 0.05                # not a blank page


def test_index_page_renders_too(tmp_path):
    page = write_index([{"op": "mse_loss_backward", "device": "atlas-a2", "report": "r.html"}],
                       str(tmp_path / "index.html"))
    dom, console, pixels = render(page, tmp_path)
    assert console == [] and "mse_loss_backward" in dom and 'data-images-loaded="0/0"' in dom
    assert float(pixels[..., :3].std()) > 0.01


def test_the_check_sees_console_errors_broken_pictures_and_blank_pages(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                   '<img src="data:image/png;base64,iVBORw0KGgo=">'
                   '<script>console.error("boom"); window.addEventListener("load", function () {'
                   'var ok = 0; for (var i = 0; i < document.images.length; i++) {'
                   'if (document.images[i].naturalWidth > 0) ok++; }'
                   'document.body.setAttribute("data-images-loaded", ok + "/" + document.images.length);'
                   '});</script></body></html>')
    dom, console, pixels = render(str(bad), tmp_path)
    assert any('"boom"' in line for line in console)
    assert 'data-images-loaded="0/1"' in dom
    assert float(pixels[..., :3].std()) < 0.01
