"""opsim capacity: UB tiles, device memory and the documented limits, evaluated from the spec."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import opsim
from opsim.kernels import registry
from opsim.kernels.common import OpError, TensorDesc
from opsim.capacity import capacity, embedding_scale_limit, format_table
from opsim.simulator import numerics as nx

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "opsim.cli_study", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def _cli_in_process(capsys, *args):
    """The CLI's exit status and stderr, run in this process: the entry point ``_cli`` starts,
    without a Python start-up and import of opsim (~0.5 s) per call. An exception escaping the
    CLI fails the test here; the subprocess path is covered by the seed-limit test's ``_cli``."""
    from opsim import cli_study
    capsys.readouterr()
    code = cli_study.main(list(args))
    return code, capsys.readouterr().err


def _seed_limit(num_weights: int, core_num: int, index_bytes: int) -> int:
    # the seed's formula, written out independently: embeddingDim < (180192 - countsSize*b)/d
    counts = num_weights // core_num + num_weights % core_num
    divisor = 36 if index_bytes == 4 else 20
    bound = (180192 - counts * index_bytes) / divisor
    e = int(bound)
    return e - 1 if e == bound else e


def test_embedding_capacity_on_atlas_training_reproduces_the_seed_limit():
    res = _cli("capacity", "embedding_dense_backward", "--device", "atlas-training")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "embeddingDim < (180192 - countsSize*4)/36" in out
    assert "embeddingDim < (180192 - countsSize*8)/20" in out
    cores = opsim.device_spec("atlas-training").cores.aic
    for nw in (1000, 32000, 50257, 128000, 250000):
        for idx, b in (("int32", 4), ("int64", 8)):
            line = next(l for l in out.splitlines() if f"numWeights={nw}, {idx}" in l)
            assert f" {_seed_limit(nw, cores, b)} " in line, line


def test_embedding_limit_is_the_operators_own_refusal_boundary():
    spec = opsim.device_spec("atlas-training")
    op = registry.get("embedding_dense_backward")
    nw = 32000
    limit = embedding_scale_limit(spec, nw, "int32")["max_embedding_dim"]
    assert limit == _seed_limit(nw, spec.cores.aic, 4) == 4894

    def call(e):
        d = {"grad": TensorDesc((64, e), nx.FP32), "indices": TensorDesc((64,), nx.INT32),
             "out": TensorDesc((nw, e), nx.FP32)}
        return op.validate(spec, d, {"num_weights": nw, "scale_grad_by_freq": True, "padding_idx": -1})

    call(limit)
    with pytest.raises(OpError) as exc:
        call(limit + 1)
    assert exc.value.code == 161002


def test_embedding_limit_follows_a_what_if_budget():
    spec = opsim.device_spec("atlas-training", {"kernels.embedding_dense_backward.ub_budget": 262144})
    got = embedding_scale_limit(spec, 32000, "int32")
    assert got["max_embedding_dim"] > 4894
    assert got["max_embedding_dim"] == int((262144 - 16416 - 4000) / 36)


def test_elementwise_capacity_gives_the_largest_tile_the_tiling_accepts():
    rows = capacity("mse_loss_backward", "atlas-a2", "fp32")
    tiles = {r.item: int(str(r.value).split()[0]) for r in rows if r.item.startswith("largest tile")}
    spec = opsim.device_spec("atlas-a2")
    op = registry.get("mse_loss_backward")
    d = {k: TensorDesc((1 << 20,), nx.FP32) for k in ("grad_output", "self", "target", "out")}
    for bn in (1, 2):
        tile = tiles[f"largest tile per core, buffer_num={bn}"]
        op.plan(spec, d, {"reduction": 1}, {"tile_length": tile, "buffer_num": bn})
        with pytest.raises(OpError) as exc:
            op.plan(spec, d, {"reduction": 1}, {"tile_length": tile + 32, "buffer_num": bn})
        assert exc.value.code == 561002
    # 3 inputs + 1 output of 4 B per element: 16 B per buffered element of the 192 KiB UB
    assert tiles["largest tile per core, buffer_num=1"] == 196608 // 16


def test_device_memory_rows_fit_and_one_more_row_does_not():
    import re
    rows = capacity("mse_loss_backward", "atlas-a3", "fp16")
    mem = next(r for r in rows if r.section == "device memory")
    r = int(re.search(r"self \[(\d+), 256\]", mem.value).group(1))
    per_row = 256 * 2 * 4            # 256 fp16 elements in each of 3 inputs and the output
    cap = opsim.device_spec("atlas-a3").gm.capacity
    assert r * per_row <= cap < (r + 1) * per_row


def test_what_if_override_changes_the_ub_rows_and_the_table_names_the_columns():
    base = capacity("mse_loss_backward", "atlas-a2", "fp32")
    big = capacity("mse_loss_backward", "atlas-a2", "fp32", {"ub.size": 262144})
    assert base[0].value != big[0].value
    table = format_table(big, "t")
    assert table.splitlines()[1].split()[:4] == ["section", "item", "value", "detail"]


def test_unknown_operator_or_dtype_is_a_clear_cli_error(capsys):
    code, err = _cli_in_process(capsys, "capacity", "no_such_op", "--device", "atlas-a2")
    assert code == 2 and "unknown operator 'no_such_op'" in err and "Traceback" not in err
    code, err = _cli_in_process(capsys, "capacity", "mse_loss_backward", "--device", "atlas-training", "--dtype", "bf16")
    assert code == 2 and "bf16" in err


def test_an_operator_on_a_product_that_does_not_support_it_has_no_capacity(capsys):
    # the call itself is refused there (361001): the table once gave its "largest shapes" anyway
    with pytest.raises(ValueError, match="mse_loss_backward is not supported on ft78ne"):
        capacity("mse_loss_backward", "ft78ne")
    code, err = _cli_in_process(capsys, "capacity", "embedding_dense_backward", "--device", "atlas-a3")
    assert code == 2 and "supported products: training, a2" in err


def test_the_memory_search_never_probes_far_beyond_what_it_has_verified():
    # a plan's cost grows with the size (FLCE walks its vocabulary): a first probe at the
    # device-memory guess took minutes while the row said "search stopped after 3 s"
    from opsim.capacity import _largest
    probes = []

    def fits(k):
        probes.append(k)
        return k <= 123_456
    assert _largest(fits, 10**9, 1000) == (123_456, True)
    verified = 1000
    for k in probes:
        assert k <= 2 * verified + 1, (k, verified)
        if k <= 123_456:
            verified = max(verified, k)


def _dsp_p_operands(n: int, dtype: str, weight: bool, reduction: int) -> dict:
    ops = {"input_x": opsim.TensorSpec((n,), dtype), "input_y": opsim.TensorSpec((n,), dtype),
           "dloss": opsim.TensorSpec((n if reduction == 0 else 1,), dtype)}
    if weight:
        ops["weight"] = opsim.TensorSpec((n,), dtype)
    return ops


@pytest.mark.parametrize("device,dtype", [("ft78ne", "fp32"), ("mt7004", "fp16")])
def test_dsp_private_storage_limit_is_the_largest_size_a_p_call_accepts(device, dtype):
    # each reported _p limit runs (timing mode) and one element more is refused: the limit counts
    # the library's working buffers in the same private memory, not just the operands
    rows = [r for r in capacity("binarycrossentropygrad", device, dtype)
            if r.item.startswith("private-storage (_p) elements")]
    assert len(rows) == 4
    for row in rows:
        weight, reduction = "with weight" in row.item, 0 if "reduction none" in row.item else 2
        n = row.value
        res = opsim.run("binarycrossentropygrad", device=device, mode="timing", trace="off", storage="private",
                        reduction=reduction, **_dsp_p_operands(n, dtype, weight, reduction))
        assert res.cycles > 0, row
        with pytest.raises(OpError, match="private memory"):
            opsim.run("binarycrossentropygrad", device=device, mode="timing", trace="off", storage="private",
                      reduction=reduction, **_dsp_p_operands(n + 1, dtype, weight, reduction))
