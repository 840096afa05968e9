"""A cost labelled ``source`` must be what its source says; anything else must be an assumption.

The golden below is Huawei's calibrated table for the 2201 platform (GE ``kParamV1Info`` in
``perf_param_v1.cpp``, docs/sources.md#vector-cost-table), typed in from the published file, not
read from the device files under test. A device-file cost entry that claims this table as its
source must name an entry the table has and carry its (k, b); an entry priced like another one
(``Subs`` like ``Adds``, bf16 casts like fp16) is an assumption and must say so.
"""
from __future__ import annotations

import pytest

from opsim.devices import catalogue, load

# API -> dtype -> (k, b), as published (the subset with fp16/fp32 entries; casts separately)
GE_PERF = {
    "Abs": {"fp16": (0.0077, 20.0153), "fp32": (0.0147, 20.0592)},
    "Add": {"fp16": (0.0103, 22.2173), "fp32": (0.0206, 23.2225)},
    "Adds": {"fp16": (0.0071, 22.0938), "fp32": (0.0141, 22.0936)},
    "Sub": {"fp16": (0.0107, 22.1226), "fp32": (0.0213, 22.1254)},
    "Mul": {"fp16": (0.0110, 23.1243), "fp32": (0.0206, 23.2291)},
    "Muls": {"fp16": (0.0071, 23.1006), "fp32": (0.0142, 23.0966)},
    "Div": {"fp16": (0.0460, 29.1233), "fp32": (0.0454, 29.0892)},
    "Max": {"fp16": (0.0111, 20.1200), "fp32": (0.0215, 20.1333)},
    "Maxs": {"fp16": (0.0071, 20.0912), "fp32": (0.0141, 20.0887)},
    "Min": {"fp16": (0.0111, 20.1104), "fp32": (0.0215, 20.1271)},
    "Mins": {"fp16": (0.0071, 20.0896), "fp32": (0.0142, 20.0876)},
    "Exp": {"fp16": (0.0311, 28.0144), "fp32": (0.0307, 28.0376)},
    "Reciprocal": {"fp16": (0.0078, 21.0076), "fp32": (0.0146, 21.0639)},
    "Rsqrt": {"fp16": (0.0071, 21.0970), "fp32": (0.0143, 21.0979)},
    "Sqrt": {"fp16": (0.0312, 29.0056), "fp32": (0.0313, 28.9961)},
    "Relu": {"fp16": (0.0077, 20.0173), "fp32": (0.0154, 20.0189)},
    "Duplicate": {"fp16": (0.0078, 16.9993), "fp32": (0.0156, 16.9965)},
    "Copy": {"fp16": (0.0078, 13.0049), "fp32": (0.0157, 12.9966)},
    "Brcb": {"fp16": (0.0074, 13.0572), "fp32": (0.0146, 13.0732)},
    "Select": {"fp16": (0.0118, 45.9656), "fp32": (0.0229, 43.9906)},
    "Gather": {"fp16": (0.1873, 17.0248), "fp32": (0.1875, 15.0000)},
    "CompareScalarEQ": {"fp16": (0.0084, 21.9204), "fp32": (0.0160, 21.9749)},
    "WholeReduceSum": {"fp16": (0.0547, 35.0021), "fp32": (0.1094, 32.0029)},
    "WholeReduceMax": {"fp16": (0.0547, 21.0027), "fp32": (0.1094, 20.0051)},
    "WholeReduceMin": {"fp16": (0.0547, 21.0056), "fp32": (0.1094, 20.0068)},
}
# Cast pairs the table has (source dtype, destination dtype) -> (k, b)
GE_CASTS = {
    ("fp16", "fp32"): (0.0147, 20.1204), ("fp32", "fp16"): (0.0087, 20.4393),
    ("fp16", "uint8"): (0.0083, 19.9408), ("uint8", "fp16"): (0.0102, 46.512),
    ("int64", "int32"): (0.0332, 18.8690),
}
# CompareXXAligned over EQ/GE/GT/LE/LT/NE: (k, b) per member; opsim's Compare takes the upper end
GE_COMPARE_ALIGNED = {
    "fp16": [(0.0155, 21.0340), (0.0155, 21.0279), (0.0160, 20.9711), (0.0155, 21.9556),
             (0.0155, 21.0297), (0.0164, 20.9123)],
    "fp32": [(0.0310, 21.0316), (0.0310, 21.0309), (0.0310, 21.0319), (0.0310, 21.0303),
             (0.0316, 20.9940), (0.0310, 21.0313)],
}
# opsim's name for a GE entry, where they differ
ALIAS = {"CompareScalar": "CompareScalarEQ"}

ASCEND = [n for n in catalogue() if load(n).family == "ascend"]


def _published(op: str, dtype: str) -> tuple[float, float] | None:
    """The (k, b) GE-PERF publishes for opsim's ``op`` in ``dtype``, or None if it has none."""
    if op.startswith("Cast_"):
        src, dst = op[len("Cast_"):].split("_")
        return GE_CASTS.get((src, dst)) if dtype == src else None
    if op == "Compare":
        members = GE_COMPARE_ALIGNED.get(dtype)
        if not members:
            return None
        return (max(k for k, _ in members), round(max(b for _, b in members), 2))
    return GE_PERF.get(ALIAS.get(op, op), {}).get(dtype)


@pytest.mark.parametrize("name", ASCEND)
def test_a_cost_labelled_source_is_the_published_entry(name):
    spec = load(name)
    wrong = []
    for op, per_dtype in spec.vector.cost.items():
        for dtype, kb in per_dtype.items():
            prov = spec.provenance[f"vector.cost.{op}.{dtype}"]
            published = _published(op, dtype)
            if prov.kind == "source" and (published is None or tuple(kb) != pytest.approx(published)):
                wrong.append(f"{op}.{dtype} = {kb} (published: {published})")
    assert wrong == [], f"{name}: costs labelled as sources that GE-PERF does not give: {wrong}"


@pytest.mark.parametrize("name", ASCEND)
def test_a_cost_the_table_lacks_says_what_it_is_priced_like(name):
    spec = load(name)
    for op, dtype, like in (("Subs", "fp32", "Adds"), ("Ln", "fp32", "Exp"),
                            ("ReduceSum", "fp32", "WholeReduceSum"),
                            ("Cast_fp32_int32", "fp32", "fp32 -> fp16")):
        prov = spec.provenance[f"vector.cost.{op}.{dtype}"]
        assert prov.kind == "assumption" and like in prov.text, (op, prov)
    assert "A-4" in spec.provenance["vector.cost.Ln.fp16"].text


@pytest.mark.parametrize("name", ASCEND)
def test_the_fp32_cube_rate_is_labelled_assumption_a5(name):
    spec = load(name)
    prov = spec.provenance["cube.macs_per_cycle.fp32"]
    assert prov.kind == "assumption" and "A-5" in prov.text
    assert spec.cube.macs_per_cycle["fp32"] == spec.cube.macs_per_cycle["fp16"] / 4
    assert spec.provenance["cube.macs_per_cycle.fp16"].kind == "source"
    if "bf16" in spec.cube.macs_per_cycle:
        # published for the 910B/910_93 fractal (DtypeMKN fp16/bf16); elsewhere an assumption
        expected = "source" if spec.soc.startswith("Ascend910") else "assumption"
        assert spec.provenance["cube.macs_per_cycle.bf16"].kind == expected
