"""The shipped device catalogue: every file loads, every number has provenance, key facts hold."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from opsim import devices
from opsim.devices import DeviceSpec, catalogue, catalogue_table, load, load_file
from opsim.devices.report import provenance_rows
from opsim.devices.spec import CATALOGUE_DIR

EXPECTED = {
    # name: (family, series, architecture)
    "atlas-a2": ("ascend", "a2", "split"),
    "atlas-a2-910b1": ("ascend", "a2", "split"),
    "atlas-a2-910b3": ("ascend", "a2", "split"),
    "atlas-a2-910b4": ("ascend", "a2", "split"),
    "atlas-a3": ("ascend", "a3", "split"),
    "atlas-training": ("ascend", "training", "coupled"),
    "atlas-inference": ("ascend", "inference", "coupled"),
    "atlas-200i-500-a2": ("ascend", "200i-500-a2", "split"),
    "ft78ne": ("dsp", "ft78ne", "dsp"),
    "mt7004": ("dsp", "mt7004", "dsp"),
}
ALL = catalogue()
ASCEND = [n for n, (fam, _, _) in EXPECTED.items() if fam == "ascend"]
DSPS = [n for n, (fam, _, _) in EXPECTED.items() if fam == "dsp"]

SEED_DDR = [0xA0000000, 0xB0000000, 0xC0000000, 0xD0000000, 0xE0000000]
SEED_PRIVATE = [0x10000000, 0x11000000, 0x12000000, 0x13000000, 0x14000000]
SEED_BYTES = 4096


def _numeric_leaves(node, path=""):
    """Dotted paths of every number (or list of numbers) in a raw spec tree."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _numeric_leaves(v, f"{path}.{k}" if path else k)
    elif isinstance(node, bool) or isinstance(node, str):
        return
    elif isinstance(node, (int, float)):
        yield path
    elif isinstance(node, (list, tuple)):
        if node and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in node):
            yield path
        else:
            for i, v in enumerate(node):
                yield from _numeric_leaves(v, f"{path}[{i}]")


def _covered(spec: DeviceSpec, path: str) -> bool:
    parts = path.split(".")
    return any(".".join(parts[:i]) in spec.provenance for i in range(len(parts), 0, -1))


def test_catalogue_lists_every_expected_device():
    assert set(EXPECTED) <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_every_catalogue_file_loads(name):
    spec = load(name)
    assert isinstance(spec, DeviceSpec)
    assert spec.name == name == Path(spec.origin).stem
    assert spec.clock_hz > 0 and spec.gm.bandwidth > 0 and spec.vector_cores > 0
    assert load_file(CATALOGUE_DIR / f"{name}.toml") == spec


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_family_series_and_architecture_match_the_product(name):
    family, series, arch = EXPECTED[name]
    spec = load(name)
    assert (spec.family, spec.series, spec.cores.architecture) == (family, series, arch)


@pytest.mark.parametrize("name", ALL)
def test_every_numeric_leaf_has_provenance(name):
    spec = load(name)
    leaves = list(_numeric_leaves(spec.raw))
    assert leaves
    missing = [p for p in leaves if not _covered(spec, p)]
    assert missing == []
    for prov in spec.provenance.values():
        assert prov.kind in ("source", "assumption") and prov.text.strip()


@pytest.mark.parametrize("name", ALL)
def test_provenance_rows_are_sorted_and_complete(name):
    spec = load(name)
    rows = provenance_rows(spec)
    assert [r[0] for r in rows] == sorted(spec.provenance)
    assert all(len(r) == 4 and all(isinstance(x, str) for x in r) for r in rows)
    row = dict((f, (v, k, t)) for f, v, k, t in rows)["clock_hz"]
    assert row[0] == str(spec.clock_hz)


def test_atlas_a2_aggregate_gm_bandwidth_is_rate_times_cores_times_clock():
    spec = load("atlas-a2")
    assert spec.gm.bandwidth == pytest.approx(32 * 24 * 1.8e9)
    assert spec.rates.gm_read * spec.cores.aic * spec.clock_hz == pytest.approx(spec.gm.bandwidth)


@pytest.mark.parametrize("name", ASCEND)
def test_ascend_gm_bandwidth_is_per_core_rate_times_ai_cores_times_clock(name):
    spec = load(name)
    expected = spec.rates.gm_read * spec.cores.aic * spec.clock_hz
    assert spec.gm.bandwidth == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name,aic,aiv,mhz,mem_gib,l2_mib,bw", [
    ("atlas-a2-910b1", 24, 48, 1850, 64, 192, 1420.8e9),
    ("atlas-a2-910b3", 20, 40, 1800, 64, 192, 1152e9),
    ("atlas-a2-910b4", 20, 40, 1500, 32, 96, 960e9),
    ("atlas-a3", 24, 48, 1850, 64, 192, 1420.8e9),
])
def test_a2_a3_variants_follow_their_ini(name, aic, aiv, mhz, mem_gib, l2_mib, bw):
    spec = load(name)
    assert (spec.cores.aic, spec.cores.aiv) == (aic, aiv)
    assert spec.clock_hz == mhz * 10**6
    assert spec.gm.kind == "HBM" and spec.gm.capacity == mem_gib << 30
    assert spec.l2.size == l2_mib << 20
    assert spec.gm.bandwidth == pytest.approx(bw)
    assert spec.ub.size == 196608
    # The 2201 calibration applies to every 910B / 910_93 part: same table as atlas-a2.
    assert spec.vector.cost == load("atlas-a2").vector.cost


def test_atlas_training_is_the_coupled_910a():
    spec = load("atlas-training")
    assert spec.cores.architecture == "coupled" and spec.cores.aic == spec.cores.aiv == 32
    assert spec.clock_hz == 1_000_000_000
    assert spec.provenance["clock_hz"].kind == "assumption" and "A-1" in spec.provenance["clock_hz"].text
    assert spec.ub.size == 262144 and spec.l2.size == 32 << 20
    assert spec.gm.kind == "HBM" and spec.gm.bandwidth == pytest.approx(1.2e12)
    assert spec.rates.gm_read == pytest.approx(37.5)
    assert spec.mte2.base == pytest.approx(9.9074 * 37.5 / 32)
    assert spec.mte2.shared == pytest.approx(15.896 * 37.5 / 32)
    assert spec.mte3.base == pytest.approx(9.96 * 37.5 / 32)
    assert spec.mte3.shared == pytest.approx(3.79 * 37.5 / 32)
    assert spec.provenance["mte2.base"].kind == "assumption"
    assert spec.vector.compute_dtypes == ("fp16", "fp32")
    # the 2201 calibration reused, less Brcb: the Ascend C API lists it on the A2 and
    # inference parts, not the training series (docs/sources.md#brcb)
    a2 = load("atlas-a2").vector.cost
    # and less the bf16 conversions: the vendor's Cast takes bf16 on Atlas A2/A3 only
    # (docs/sources.md#bf16-conversion)
    not_here = {"Brcb", "Cast_bf16_fp32", "Cast_fp32_bf16"}
    assert not_here <= set(a2) and not not_here & set(spec.vector.cost)
    assert spec.vector.cost == {op: v for op, v in a2.items() if op not in not_here}
    assert "A-7" in spec.provenance["vector.cost.Add.fp32"].text


def test_embedding_budget_on_atlas_training_is_the_documented_constant_plus_reserve():
    spec = load("atlas-training")
    budget = spec.kernels["embedding_dense_backward"]["ub_budget"]
    assert budget == 180192 + 16416
    assert budget != spec.ub.size
    prov = spec.provenance["kernels.embedding_dense_backward.ub_budget"]
    assert prov.kind == "source" and "sources.md#embedding-ub-limit" in prov.text


def test_atlas_inference_uses_the_aicore_share_of_the_ddr():
    spec = load("atlas-inference")
    assert spec.cores.aic == spec.cores.aiv == 8
    assert spec.clock_hz == 1_060_000_000
    assert spec.gm.kind == "DDR"
    assert spec.gm.bandwidth == pytest.approx(17 * 8 * 1.06e9) == pytest.approx(144.16e9)
    assert "VectorCore" in spec.description and "8 AI cores" in spec.description
    assert spec.mte2.base == pytest.approx(9.9074 * 17 / 32)


def test_atlas_200i_500_a2_is_one_aic_one_aiv():
    spec = load("atlas-200i-500-a2")
    assert (spec.cores.architecture, spec.cores.aic, spec.cores.aiv) == ("split", 1, 1)
    assert spec.clock_hz == 1_224_000_000
    assert spec.ub.size == 253952 and spec.l2.size == 4 << 20
    assert spec.gm.kind == "DDR" and spec.gm.capacity == 32 << 30
    assert spec.gm.bandwidth == pytest.approx(20.8e9, rel=1e-3)


@pytest.mark.parametrize("name", DSPS)
def test_dsp_windows_admit_the_seed_addresses(name):
    spec = load(name)
    gm, priv = spec.gm, spec.private
    for addr in SEED_DDR:
        assert gm.base <= addr and addr + SEED_BYTES <= gm.base + gm.window
        assert addr % gm.alignment == 0
    for addr in SEED_PRIVATE:
        assert priv.base <= addr and addr + SEED_BYTES <= priv.base + priv.window
        assert addr % priv.alignment == 0


@pytest.mark.parametrize("name", DSPS)
def test_dsp_parts_have_no_ascend_sections(name):
    spec = load(name)
    for sec in ("ub", "l1", "l0a", "l0b", "l0c", "l2", "mte2", "mte3", "cube"):
        assert getattr(spec, sec) is None
    assert spec.dma is not None and spec.private is not None and spec.smc is not None
    assert not any(k in spec.raw for k in ("ub", "l1", "l2", "rates", "mte2", "mte3"))


def test_ft78ne_numbers():
    spec = load("ft78ne")
    assert spec.cores.dsp == 8 and spec.vector_cores == 8
    assert spec.clock_hz == 1_000_000_000
    assert spec.vector.compute_dtypes == ("fp32",)
    assert dict(spec.vector.lanes) == {"fp32": 16}
    assert spec.vector.repeat_bytes == 16 * 4
    assert spec.gm.bandwidth == pytest.approx(12.8e9)
    assert spec.private.capacity == 512 * 1024 and spec.smc.capacity == 4 << 20
    assert spec.launch.overhead == 100_000  # 0.1 ms at 1 GHz
    assert spec.dma.startup == 1000
    # one core cannot saturate DDR, two can
    per_core = spec.dma.base * spec.clock_hz
    assert per_core < spec.gm.bandwidth <= 2 * per_core
    for op in ("Add", "Sub", "Mul", "Div", "Adds", "Muls", "Maxs", "Duplicate", "Copy", "Reciprocal"):
        k, b = spec.vector.cost[op]["fp32"]
        assert b == 8 and k > 0
        assert spec.provenance[f"vector.cost.{op}.fp32"].kind == "assumption"
    assert spec.vector.cost["Add"]["fp32"][0] == pytest.approx(1 / 16)
    assert spec.vector.cost["Div"]["fp32"][0] == pytest.approx(4 / 16)


def test_mt7004_numbers():
    spec = load("mt7004")
    assert spec.cores.dsp == 4
    assert spec.clock_hz == 1_800_000_000
    assert spec.vector.compute_dtypes == ("fp16", "fp32")
    assert dict(spec.vector.lanes) == {"fp32": 16, "fp16": 32}
    assert spec.gm.bandwidth == pytest.approx(25.6e9)
    assert spec.private.capacity == 786432 and spec.smc.capacity == 6 << 20
    assert spec.cycles_to_us(spec.launch.overhead) == pytest.approx(150.0)
    per_core = spec.dma.base * spec.clock_hz
    assert per_core < spec.gm.bandwidth <= 2 * per_core
    cost = spec.vector.cost
    assert cost["Add"]["fp16"][0] == pytest.approx(1 / 32) and cost["Add"]["fp32"][0] == pytest.approx(1 / 16)
    assert set(cost["Cast_fp16_fp32"]) == {"fp16"} and set(cost["Cast_fp32_fp16"]) == {"fp32"}


@pytest.mark.parametrize("name", ALL)
def test_vector_cost_covers_every_compute_dtype_of_the_bce_ops(name):
    spec = load(name)
    for op in ("Add", "Sub", "Mul", "Div", "Adds", "Muls", "Maxs", "Duplicate", "Copy", "Reciprocal"):
        for dt in spec.vector.compute_dtypes:
            k, b = spec.vector.cost[op][dt]
            assert math.isfinite(k) and math.isfinite(b)


def test_package_exports():
    for sym in ("load", "load_file", "catalogue", "DeviceSpec", "SpecError", "Provenance",
                "catalogue_table"):
        assert hasattr(devices, sym)


def test_catalogue_table_mentions_every_device_and_its_provenance():
    out = catalogue_table()
    flat = " ".join(out.split())
    for name in ALL:
        spec = load(name)
        assert f"== {name} " in out
        assert spec.soc in out
    assert "source: docs/sources.md#soc-a2-a3: INI:Ascend910B2 cube_freq" in flat
    assert "assumption: A-1" in flat
    assert "assumption: A-D2" in flat
    assert "[S1]" in out and "[A1]" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_catalogue_table_without_provenance_and_for_a_subset():
    out = catalogue_table(["atlas-a2", "ft78ne"], provenance=False)
    assert "atlas-a2" in out and "ft78ne" in out and "mt7004" not in out
    assert "source:" not in out and "assumption:" not in out and "[S1]" not in out
    assert "1800 MHz" in out and "1382.4 GB/s" in out
    assert "12.8 GB/s" in out and "512 KiB" in out
    assert "DDR 24 GB" in catalogue_table(["atlas-inference"], provenance=False)


def test_catalogue_table_shows_overrides():
    spec = load("atlas-a2").replace("ub.size", 262144)
    out = catalogue_table([spec])
    assert "256 KiB" in out and "[O1]" in out and "override:" in out


@pytest.mark.parametrize("name", ALL)
def test_every_field_view_lists_each_number_of_the_file_with_its_tag(name):
    spec = load(name)
    out = catalogue_table([name], every_field=True)
    listed = {}
    section = out.split("  every field:\n")[1].split("  provenance:\n")[0]
    for line in section.splitlines():
        parts = line.split()
        listed[parts[0]] = parts[-1]
    assert set(listed) == set(spec.provenance)
    notes_text = out.split("  provenance:\n")[1].split("  sources (")[0]
    notes = {m.group(1): " ".join(m.group(2).split())
             for m in re.finditer(r"^  \[(\w+)\]\s+(.*?)(?=^  \[|\Z)", notes_text, re.M | re.S)}
    for field_, tag in listed.items():
        assert tag.startswith("[") and tag.endswith("]"), (field_, tag)
        # the tag's note carries the field's own provenance text and names the field
        note = notes[tag[1:-1]]
        assert " ".join(spec.provenance[field_].text.split())[:40] in note
        assert field_ in note


def test_the_summary_shows_store_rates_cube_peak_and_host_link_with_provenance():
    out = catalogue_table(["atlas-a2"])
    assert "MTE3      9.96 + 3.79/n B/cycle per core, start-up 12 cycles" in out
    # 4096 MAC x 2 x 24 AIC x 1.8 GHz = 353.9 TFLOPS (docs/sources.md#peak-compute)
    assert "cube peak 353.9 TFLOPS fp16 = 4096 x 2 x 24 cores x 1800 MHz" in out
    assert "fp32 1024" in out and "host      PCIe 50.4 GB/s per direction" in out
    flat = " ".join(out.split())
    assert "assumption: A-5: the fp32 cube rate is not published" in flat
    dsp = catalogue_table(["ft78ne"], provenance=False)
    assert "default core_mask 0xff" in dsp
    assert "vec peak  128 G fp32 ops/s = 16 lanes x 8 cores x 1000 MHz" in dsp   # A-D2's 128 GFLOPS


def test_opsim_devices_all_lists_the_cost_table(capsys):
    from opsim.cli import main
    assert main(["devices", "atlas-a2", "--all"]) == 0
    out = capsys.readouterr().out
    assert "vector.cost.Subs.fp32" in out and "rates.ub_to_gm" in out and "gm.base" in out
    assert "0x124000000000" in out
