"""The README's device catalogue table agrees with the device files, one row per device.

Read from README.md as a user sees it and compared with the loaded TOMLs directly (not through
opsim/docfigs.py, which writes the table): a device missing from the table, or a row whose
cores, clock, UB or GM link differ from its file, fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from opsim import devices

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> dict[str, list[str]]:
    text = README.read_text()
    block = text.split("<!-- figure: device-catalogue -->")[1].split("<!-- /figure -->")[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def _bytes_per_s(text: str) -> float:
    m = re.fullmatch(r"([\d.]+) (GB|TB)/s", text)
    assert m, text
    return float(m.group(1)) * (1e12 if m.group(2) == "TB" else 1e9)


@pytest.mark.parametrize("name", devices.catalogue())
def test_every_device_has_its_own_row_matching_its_file(name):
    rows = _rows()
    assert name in rows, f"{name} has no row in the README's device catalogue"
    _, soc, cores, clock, ub, gm, _timing = rows[name]
    spec = devices.load(name)
    c = spec.cores
    assert cores == {"split": f"{c.aic} AIC + {c.aiv} AIV", "coupled": f"{c.aic} coupled AI cores",
                     "dsp": f"{c.dsp} DSP cores"}[c.architecture]
    assert float(clock.split()[0]) * 1e6 == spec.clock_hz
    local = spec.ub.size if spec.ub is not None else spec.private.capacity
    assert int(ub.split()[-2]) * 1024 == local
    kind, rate = gm.split(" (")[0].split(" ", 1)
    assert kind == spec.gm.kind
    assert _bytes_per_s(rate) == pytest.approx(spec.gm.bandwidth, rel=0.005)


def test_the_table_has_no_row_for_a_device_that_does_not_exist():
    assert set(_rows()) <= set(devices.catalogue())
