"""Host memory needed by a full- or numeric-mode call is computed first and refused with the
numbers when over the documented budget (OPSIM_HOST_MEMORY_BUDGET)."""
from __future__ import annotations


import numpy as np
import pytest

import opsim
from opsim.limits import HostMemoryError, check_host_memory, host_memory_budget, parse_bytes


def test_full_mode_embedding_with_a_huge_vocabulary_is_refused_before_anything_is_built():
    grad = np.ones((256, 16), np.float32)          # 16 KiB of input
    indices = np.zeros(256, np.int32)
    with pytest.raises(HostMemoryError) as info:
        opsim.run("embedding_dense_backward", grad=grad, indices=indices, num_weights=500_000_000)
    msg = str(info.value)
    # out is 5e8 x 16 fp32 = 32 GB: the device copy and the host copy
    assert "embedding_dense_backward in full mode needs about 59.6 GiB" in msg
    assert "out 500000000x16" in msg and "OPSIM_HOST_MEMORY_BUDGET" in msg
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ValueError)
    # the same call in timing mode holds no data and is not limited by the budget
    res = opsim.run("embedding_dense_backward", mode="estimate", grad=opsim.TensorSpec((256, 16)),
                    indices=opsim.TensorSpec((256,), "int32"), num_weights=500_000_000)
    assert res.cycles > 0


def test_the_budget_is_an_environment_variable(monkeypatch):
    monkeypatch.setenv("OPSIM_HOST_MEMORY_BUDGET", "1M")
    assert host_memory_budget() == 1 << 20
    x = np.ones((512, 512), np.float32)            # 1 MiB per operand
    with pytest.raises(HostMemoryError, match="budget of 1.0 MiB"):
        opsim.run("mse_loss_backward", grad_output=x, self=x, target=x)
    with pytest.raises(HostMemoryError, match="numeric mode"):
        opsim.run("mse_loss_backward", mode="numeric", grad_output=x, self=x, target=x, reduction="none")
    monkeypatch.setenv("OPSIM_HOST_MEMORY_BUDGET", "8M")
    assert opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, trace="off").outputs["out"].shape == (512, 512)
    monkeypatch.setenv("OPSIM_HOST_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="OPSIM_HOST_MEMORY_BUDGET"):
        host_memory_budget()


def test_parse_bytes():
    assert parse_bytes("64G") == 64 << 30 and parse_bytes("1.5KiB") == 1536 and parse_bytes("100") == 100
    for bad in ("", "-1", "x", "0"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_check_host_memory_counts_operands_outputs_twice_and_the_workspace(monkeypatch):
    class D:
        def __init__(self, n): self.nbytes, self.shape = n, (n,)
    monkeypatch.setenv("OPSIM_HOST_MEMORY_BUDGET", str(10 ** 9))
    descs = {"a": D(100), "b": D(50), "out": D(10)}
    assert check_host_memory("op", "full", descs, {"out": D(10)}, 7) == 150 + 2 * 10 + 7
    assert check_host_memory("op", "numeric", descs, {"out": D(10)}) == 20
