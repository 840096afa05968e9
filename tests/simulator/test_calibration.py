"""The DES reproduces the published MTE2 load formula within 15% (docs/calibration.md)."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("calibrate", ROOT / "benchmarks" / "calibrate.py")
calibrate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibrate)


@pytest.mark.parametrize("block_dim", calibrate.BLOCK_DIMS)
def test_simulated_gm_to_ub_load_matches_published_formula_within_15_percent(block_dim):
    for kib in calibrate.SIZES_KIB:
        nbytes = kib * 1024
        f = calibrate.formula_cycles(nbytes, block_dim)
        s = calibrate.simulate_cycles(nbytes, block_dim)
        assert abs(s - f) / f < 0.15, (block_dim, kib, f, s)


def test_calibration_doc_exists_and_states_the_error():
    text = (ROOT / "docs" / "calibration.md").read_text()
    assert "mean |error|" in text and "| 48 | 64 |" in text
