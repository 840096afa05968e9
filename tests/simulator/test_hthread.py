"""The DSP host runtime: device, bare-metal memory, allocation by MemType, thread groups."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.simulator.hthread import (HT_ERROR_BAD_ADDRESS, HT_ERROR_BAD_ALLOC, HT_ERROR_CORE_MASK, HT_ERROR_GROUP,
                               HT_ERROR_INVALID_PARAM, HT_ERROR_KERNEL_FAULT, HT_ERROR_NOT_OPEN, HT_SUCCESS,
                               HThread, MemType)
from opsim.simulator.isa import ScalarOp
from opsim.simulator.tile import GlobalTensor
from opsim.simulator import numerics as nx

DDR_ADDR = 0xA0000000       # the seed's _s input_x
PRIV_ADDR = 0x10000000      # the seed's _p input_x


@pytest.fixture
def rt() -> HThread:
    r = HThread("ft78ne", trace_level="off")
    assert r.hthread_dev_open(0) == HT_SUCCESS
    return r


def record_core(ctx, log):
    """A kernel that notes which core runs which thread."""
    log.append((ctx.block_idx, ctx.core.name))
    yield ScalarOp(1, "record")


def test_calls_before_open_return_not_open_with_a_message():
    r = HThread("ft78ne", trace_level="off")
    addr, ret = r.hthread_malloc(0, 64)
    assert ret == HT_ERROR_NOT_OPEN and addr == 0
    assert "hthread_dev_open" in r.get_recent_err_msg()
    assert r.hthread_mem_write(0, DDR_ADDR, np.zeros(4, np.float32)) == HT_ERROR_NOT_OPEN


def test_only_cluster_zero_exists(rt):
    assert rt.hthread_dev_open(1) == HT_ERROR_NOT_OPEN
    assert "cluster id 1" in rt.get_recent_err_msg()


def test_an_ascend_device_cannot_be_opened_as_a_dsp():
    r = HThread("atlas-a2", trace_level="off")
    assert r.hthread_dev_open(0) == HT_ERROR_INVALID_PARAM
    assert "not a DSP" in r.get_recent_err_msg()


def test_ddr_is_written_and_read_at_the_seed_address_without_malloc(rt):
    data = np.arange(1024, dtype=np.float32)
    assert rt.hthread_mem_write(0, DDR_ADDR, data) == HT_SUCCESS
    raw, ret = rt.hthread_mem_read(0, DDR_ADDR, data.nbytes)
    assert ret == HT_SUCCESS
    np.testing.assert_array_equal(raw.view(np.float32), data)


def test_every_core_has_its_own_private_memory_at_the_same_address(rt):
    for core in range(8):
        assert rt.hthread_mem_write(0, PRIV_ADDR, np.full(16, core, np.int32), core_id=core) == HT_SUCCESS
    for core in range(8):
        raw, ret = rt.hthread_mem_read(0, PRIV_ADDR, 64, core_id=core)
        assert ret == HT_SUCCESS and (raw.view(np.int32) == core).all()


def test_a_private_address_needs_a_core_id(rt):
    assert rt.hthread_mem_write(0, PRIV_ADDR, np.zeros(4, np.float32)) == HT_ERROR_INVALID_PARAM
    assert "core_id" in rt.get_recent_err_msg() and "0..7" in rt.get_recent_err_msg()


def test_an_address_outside_every_window_is_a_bad_address(rt):
    assert rt.hthread_mem_write(0, 0x20000000, np.zeros(4, np.float32)) == HT_ERROR_BAD_ADDRESS
    msg = rt.get_recent_err_msg()
    assert "0x20000000" in msg and "DDR" in msg and "private" in msg


def test_private_memory_beyond_its_capacity_is_refused(rt):
    cap = rt.spec.private.capacity
    # pages spread over the 128 MiB window: each backs 4 KiB, the capacity runs out
    ret = HT_SUCCESS
    for i in range(cap // 4096 + 1):
        ret = rt.hthread_mem_write(0, PRIV_ADDR + i * 0x10000, np.ones(1, np.float32), core_id=3)
        if ret != HT_SUCCESS:
            break
    assert ret == HT_ERROR_BAD_ALLOC and "capacity" in rt.get_recent_err_msg()


@pytest.mark.parametrize("mem_type,window", [(MemType.DDR, "gm"), (MemType.DDR36BIT, "gm"), (MemType.SMC, "smc"),
                                             (MemType.L2, "private")])
def test_host_tlsf_malloc_allocates_in_the_window_of_its_mem_type(rt, mem_type, window):
    addr, ret = rt.host_tlsf_malloc(0, 2, mem_type, 1000)
    assert ret == HT_SUCCESS
    w = getattr(rt.spec, window)
    size = w.window
    assert w.base <= addr < w.base + size and addr % 64 == 0
    core = 2 if mem_type == MemType.L2 else -1
    assert rt.hthread_mem_write(0, addr, np.ones(250, np.float32), core_id=core) == HT_SUCCESS
    assert rt.hthread_free(0, addr, core_id=core) == HT_SUCCESS
    assert rt.hthread_free(0, addr, core_id=core) == HT_ERROR_BAD_ADDRESS       # double free
    assert "double free" in rt.get_recent_err_msg()


def test_l2_allocations_are_per_core(rt):
    a0, _ = rt.host_tlsf_malloc(0, 0, MemType.L2, 4096)
    a1, _ = rt.host_tlsf_malloc(0, 1, MemType.L2, 4096)
    assert a0 == a1 == rt.spec.private.base        # same address, different cores


def test_malloc_rejects_a_bad_mem_type_size_or_core(rt):
    assert rt.host_tlsf_malloc(0, 0, 7, 64)[1] == HT_ERROR_INVALID_PARAM
    assert "mem_type 7" in rt.get_recent_err_msg()
    assert rt.hthread_malloc(0, 0)[1] == HT_ERROR_INVALID_PARAM
    assert rt.host_tlsf_malloc(0, 8, MemType.L2, 64)[1] == HT_ERROR_INVALID_PARAM
    assert "core_id 8" in rt.get_recent_err_msg()
    assert rt.hthread_malloc(0, 64, flags=9)[1] == HT_ERROR_INVALID_PARAM


def test_l2_malloc_beyond_the_private_capacity_is_a_bad_alloc(rt):
    addr, ret = rt.host_tlsf_malloc(0, 0, MemType.L2, rt.spec.private.capacity + 64)
    assert ret == HT_ERROR_BAD_ALLOC and addr == 0


def test_host_mem_copy_moves_bytes_both_ways(rt):
    src = np.linspace(0, 1, 100, dtype=np.float32)
    assert rt.host_mem_copy(0, src, DDR_ADDR, src.nbytes, 0) == HT_SUCCESS
    dst = np.zeros_like(src)
    assert rt.host_mem_copy(0, dst, DDR_ADDR, src.nbytes, 1) == HT_SUCCESS
    np.testing.assert_array_equal(dst, src)
    assert rt.host_mem_copy(0, dst, DDR_ADDR, src.nbytes, 2) == HT_ERROR_INVALID_PARAM


@pytest.mark.parametrize("mask", [0x1, 0x81, 0xF0, 0xFF])
def test_a_masked_group_runs_one_thread_per_set_bit_on_those_cores(rt, mask):
    log: list = []
    gid, ret = rt.hthread_group_masked_create(0, mask, record_core, 0, 1, (log,))
    assert ret == HT_SUCCESS
    assert rt.hthread_group_exec(gid) == HT_SUCCESS
    assert rt.hthread_group_wait(gid) == HT_SUCCESS
    cores = [i for i in range(8) if mask >> i & 1]
    assert sorted(log) == [(b, f"dsp.core{c}") for b, c in enumerate(cores)]
    assert rt.groups[gid].cycles >= rt.spec.launch.overhead
    assert rt.hthread_group_destroy(gid) == HT_SUCCESS


def test_group_create_takes_the_lowest_cores(rt):
    log: list = []
    gid, ret = rt.hthread_group_create(0, 3, record_core, 0, 1, (log,))
    assert ret == HT_SUCCESS and rt.groups[gid].mask == 0b111


@pytest.mark.parametrize("mask,why", [(0, "selects no core"), (0x100, "beyond the 8 DSP cores"),
                                      (None, "None is not an integer"), (3.0, "3.0 is not an integer")])
def test_a_core_mask_of_zero_or_beyond_the_cores_is_refused(rt, mask, why):
    gid, ret = rt.hthread_group_masked_create(0, mask, record_core, 0, 1, ([],))
    assert (gid, ret) == (-1, HT_ERROR_CORE_MASK)
    assert why in rt.get_recent_err_msg() and "0x1..0xff" in rt.get_recent_err_msg()


def test_group_calls_in_the_wrong_state_are_refused(rt):
    gid, _ = rt.hthread_group_masked_create(0, 1, record_core, 0, 1, ([],))
    assert rt.hthread_group_wait(gid) == HT_ERROR_GROUP
    assert "exec it first" in rt.get_recent_err_msg()
    assert rt.hthread_group_exec(999) == HT_ERROR_GROUP
    assert rt.hthread_group_exec(gid) == HT_SUCCESS
    assert rt.hthread_group_exec(gid) == HT_ERROR_GROUP          # already running
    assert rt.hthread_group_destroy(gid) == HT_ERROR_GROUP       # still running
    assert rt.hthread_group_wait(gid) == HT_SUCCESS


def test_argument_counts_must_match_the_arguments(rt):
    assert rt.hthread_group_masked_create(0, 1, record_core, 1, 1, ([],))[1] == HT_ERROR_INVALID_PARAM
    assert "n_scalar 1 + n_ptr 1" in rt.get_recent_err_msg()


def test_kernels_are_launched_by_name_after_dat_load(rt):
    assert rt.hthread_group_masked_create(0, 1, "record", 0, 1, ([],))[1] == HT_ERROR_INVALID_PARAM
    assert rt.hthread_dat_load(0, {"record": record_core}) == HT_SUCCESS
    log: list = []
    gid, ret = rt.launch_group(0, 0x3, "record", (log,))      # MindSpore Lite LaunchGroup
    assert ret == HT_SUCCESS and rt.wait_group(gid) == HT_SUCCESS and len(log) == 2
    assert rt.destroy_group(gid) == HT_SUCCESS


def faulting_kernel(ctx, device):
    """Reads 64 B from an address in no window: a memory fault on the device."""
    from opsim.simulator.isa import DataCopyPad
    src = GlobalTensor.contiguous(device, 0x40000000, nx.FP32, (16,))
    buf = ctx.tbuf(64, nx.FP32)
    yield DataCopyPad(buf, src[0:16], 16)


def test_a_kernel_fault_is_a_status_not_an_exception_and_reopen_recovers(rt):
    gid, _ = rt.hthread_group_masked_create(0, 1, faulting_kernel, 0, 1, (rt.device,))
    assert rt.hthread_group_exec(gid) == HT_SUCCESS
    assert rt.hthread_group_wait(gid) == HT_ERROR_KERNEL_FAULT
    msg = rt.get_recent_err_msg()
    assert "MemoryFault" in msg and "dsp.core0" in msg and "0x40000000" in msg
    assert rt.hthread_dev_close(0) == HT_SUCCESS and rt.hthread_dev_open(0) == HT_SUCCESS
    log: list = []
    gid, _ = rt.launch_group(0, 1, record_core, (log,))
    assert rt.wait_group(gid) == HT_SUCCESS and log


def test_a_waited_group_leaves_no_stream_or_launch_on_the_device_but_keeps_its_cycles(rt):
    # two groups run at once; waiting for one forgets only its stream and launch
    a, _ = rt.hthread_group_masked_create(0, 0x1, record_core, 0, 1, ([],))
    b, _ = rt.hthread_group_masked_create(0, 0x2, record_core, 0, 1, ([],))
    assert rt.hthread_group_exec(a) == HT_SUCCESS and rt.hthread_group_exec(b) == HT_SUCCESS
    assert rt.hthread_group_wait(a) == HT_SUCCESS
    assert rt.device.streams == [rt.groups[b].stream]
    assert rt.groups[a].cycles >= rt.spec.launch.overhead
    assert rt.hthread_group_wait(b) == HT_SUCCESS
    assert rt.device.streams == [] and rt.device.launches == []
    assert rt.groups[b].cycles >= rt.spec.launch.overhead
    c, _ = rt.hthread_group_masked_create(0, 0x1, record_core, 0, 1, ([],))
    assert rt.hthread_group_exec(c) == HT_SUCCESS
    assert rt.groups[c].stream.name == "stream2"          # stream names are never reused


@pytest.mark.slow
def test_a_long_lived_hthread_runtime_does_not_grow_per_call():
    import gc
    import logging
    import tracemalloc

    from opsim.kernels.dsp import DspLibrary
    r = HThread("ft78ne", trace_level="off")
    assert r.hthread_dev_open(0) == HT_SUCCESS
    lib = DspLibrary(r)
    x, y, dloss, dx = DDR_ADDR, DDR_ADDR + 0x10000, DDR_ADDR + 0x20000, DDR_ADDR + 0x30000
    r.hthread_mem_write(0, x, np.full(1024, 0.3, np.float32))
    r.hthread_mem_write(0, y, np.full(1024, 0.7, np.float32))
    r.hthread_mem_write(0, dloss, np.ones(1, np.float32))

    def call() -> None:
        assert lib.fp_binarycrossentropygrad_s(1024, 1, x, y, 0, dloss, dx, 0, 0xFF) == 0, r.get_recent_err_msg()

    logging.disable(logging.WARNING)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(100):            # warm-up: every core has run, the queues reached their depth
            call()
        readings = []
        for _ in range(4):
            for _ in range(64):
                call()
            gc.collect()                # the launches' reference cycles go at the collector's pace
            readings.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        logging.disable(logging.NOTSET)
    per_call = (readings[-1] - readings[0]) / (3 * 64)
    # was ~5,900 B per call (every stream, launch and link rate step kept); measured 2-4 B now
    assert per_call < 64, (per_call, readings)
