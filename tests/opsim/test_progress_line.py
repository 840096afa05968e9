"""The status line `opsim run` shows while a long run simulates (opsim/progress.py)."""
from __future__ import annotations

import io
import json

import pytest

from opsim import progress as line_module
from opsim.cli import main
from opsim.progress import RunProgress
from opsim.simulator import progress as ticker_module


@pytest.fixture
def fast_clocks(monkeypatch):
    """Wall clocks that move one second per reading, so every tick reports and shows."""
    for module in (line_module, ticker_module):
        now = [0.0]

        def tick(now=now) -> float:
            now[0] += 1.0
            return now[0]
        monkeypatch.setattr(module.time, "perf_counter", tick)


def test_the_line_shows_cycles_share_of_the_estimate_and_time_then_clears(fast_clocks):
    out = io.StringIO()
    asked = []
    line = RunProgress(lambda: asked.append(1) or 2_000_000, stream=out, delay_s=0.5)
    line(500_000)
    line(1_990_000)
    line(2_400_000)                      # past the estimate: never shown as done
    text = out.getvalue()
    assert "simulated 500 k cycles of ~2 M estimated (25%)" in text
    assert "(99%)" in text and "(100%)" not in text and "(120%)" not in text
    assert asked == [1]                  # the estimate is computed once
    line.close()
    assert out.getvalue().endswith("\r") and line.width == 0


def test_a_failing_estimate_leaves_the_total_out(fast_clocks):
    out = io.StringIO()

    def no_estimate() -> int:
        raise ValueError("no estimate for this operator")
    line = RunProgress(no_estimate, stream=out, delay_s=0.5)
    line(1234)
    assert "simulated 1.23 k cycles, " in out.getvalue() and "estimated" not in out.getvalue()


def test_nothing_is_shown_before_the_delay():
    out = io.StringIO()
    line = RunProgress(lambda: 10, stream=out, delay_s=3600)
    line(5)
    line.close()
    assert out.getvalue() == ""


def test_run_with_progress_shows_the_line_on_stderr_and_the_same_result(fast_clocks, capsys):
    args = ["run", "mse_loss_backward", "--shape", "262144", "--mode", "timing", "--json"]
    assert main(args + ["--progress"]) == 0
    shown = capsys.readouterr()
    assert "opsim: simulated" in shown.err and "estimated (" in shown.err
    assert main(args + ["--no-progress"]) == 0
    plain = capsys.readouterr()
    assert plain.err == ""
    assert json.loads(shown.out) == json.loads(plain.out)
