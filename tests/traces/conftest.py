"""Fixtures of the trace tests (helpers live in trace_cases.py)."""
from __future__ import annotations

import pytest

from trace_cases import mse_run


@pytest.fixture(scope="session")
def mse_runs():
    """MSE backward on atlas-a2, 4 cores, 4 tiles each, double buffered, at every level."""
    return {lvl: mse_run(lvl) for lvl in ("launch", "tile", "instruction")}
