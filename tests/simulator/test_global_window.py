"""GlobalSlice reads and writes through the tensor's window: the same bytes as the general path,
and never stale (a freed allocation, a host array lent to the device)."""
from __future__ import annotations

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.errors import MemoryFault
from opsim.simulator.tile import GlobalTensor

A2 = devices.load("atlas-a2")


def _tensor(dev: Device, arr: np.ndarray, *, share: bool = False) -> GlobalTensor:
    addr = dev.malloc(arr.nbytes)
    dev.write(addr, arr, share=share)
    return GlobalTensor.contiguous(dev, addr, nx.dtype(arr.dtype), arr.shape)


def test_slices_read_and_write_the_tensors_bytes():
    dev = Device(A2)
    t = _tensor(dev, np.arange(64, dtype=np.float32))
    np.testing.assert_array_equal(t[8:16].read(8), np.arange(8, 16, dtype=np.float32))
    assert t.window() is not None
    t[4:8].write(np.full(4, -1, np.float32))
    got = dev.read(t.addr, 64 * 4).view(np.float32)
    want = np.arange(64, dtype=np.float32)
    want[4:8] = -1
    np.testing.assert_array_equal(got, want)


def test_a_read_past_the_view_inside_the_allocation_reads_the_allocation():
    # a DataCopy may move more elements than its slice holds: the allocation decides, not the view
    dev = Device(A2)
    addr = dev.malloc(64 * 4)
    dev.write(addr, np.arange(64, dtype=np.float32))
    t = GlobalTensor.contiguous(dev, addr, nx.FP32, (32,))
    np.testing.assert_array_equal(t[28:32].read(8), np.arange(28, 36, dtype=np.float32))
    t[30:32].write(np.full(4, 5, np.float32))
    np.testing.assert_array_equal(dev.read(addr + 30 * 4, 16).view(np.float32), np.full(4, 5, np.float32))


def test_a_write_into_a_lent_host_array_copies_it_first_and_later_reads_see_the_write():
    host = np.arange(32, dtype=np.float32)
    dev = Device(A2)
    t = _tensor(dev, host, share=True)
    before = t[0:32].read(32)               # the window on the lent bytes (read-only)
    assert not before.flags.writeable
    t[0:8].write(np.zeros(8, np.float32))
    np.testing.assert_array_equal(host, np.arange(32, dtype=np.float32))   # never modified
    np.testing.assert_array_equal(t[0:8].read(8), np.zeros(8, np.float32))
    np.testing.assert_array_equal(t[8:16].read(8), np.arange(8, 16, dtype=np.float32))
    t[8:12].write(np.ones(4, np.float32))   # through the new window, still not the host's bytes
    np.testing.assert_array_equal(host, np.arange(32, dtype=np.float32))
    np.testing.assert_array_equal(dev.read(t.addr + 32, 16).view(np.float32), np.ones(4, np.float32))


def test_a_freed_allocation_faults_though_its_window_was_taken():
    dev = Device(A2)
    t = _tensor(dev, np.ones(16, np.float32))
    t[0:4].read(4)
    dev.free(t.addr)
    with pytest.raises(MemoryFault, match="use after free"):
        t[0:4].read(4)
    with pytest.raises(MemoryFault, match="use after free"):
        t[0:4].write(np.zeros(4, np.float32))


def test_a_new_allocation_at_the_same_address_is_read_not_the_old_bytes():
    dev = Device(A2)
    t = _tensor(dev, np.ones(16, np.float32))
    t[0:4].read(4)
    dev.free(t.addr)
    addr = dev.malloc(16 * 4)
    assert addr == t.addr
    dev.write(addr, np.full(16, 3, np.float32))
    np.testing.assert_array_equal(t[0:4].read(4), np.full(4, 3, np.float32))


def test_no_window_on_unbacked_memory_or_a_strided_view():
    dev = Device(A2)
    addr = dev.malloc(64 * 4)
    t = GlobalTensor.contiguous(dev, addr, nx.FP32, (64,))
    assert t.window() is None                                  # nothing backed yet
    np.testing.assert_array_equal(t[0:8].read(8), np.zeros(8, np.float32))
    t[0:8].write(np.ones(8, np.float32))
    assert t.window() is not None
    strided = GlobalTensor(dev, addr, nx.FP32, (8, 4), (8, 2), 0)
    assert strided.window() is None
    np.testing.assert_array_equal(strided[0:4].read(4), [1, 1, 1, 1])
    np.testing.assert_array_equal(strided[4:8].read(4), [0, 0, 0, 0])


@pytest.mark.parametrize("nbytes", [4 << 10, (64 << 20) + 4096], ids=["dense", "page-wise"])
@pytest.mark.parametrize("how", ["free", "reset"])
def test_a_window_lets_go_of_its_memory_when_the_allocation_dies(nbytes, how):
    # a launch keeps its GlobalTensor arguments (and so their windows) after the call: a window
    # that held the backing would keep freed device memory alive for as long (review finding)
    import gc
    import weakref
    dev = Device(A2)
    addr = dev.malloc(nbytes)
    dev.write(addr, np.ones(1024, np.float32))
    t = GlobalTensor.contiguous(dev, addr, nx.FP32, (nbytes // 4,))
    t[0:16].read(16)
    assert t._win[0] is not None and t._win[0].alloc.alive
    store = t._win[0].alloc._store
    backing = weakref.ref(store._segs[0].data)
    del store
    if how == "free":
        dev.free(addr)
    else:
        dev.gm.reset()
    gc.collect()
    assert backing() is None
    with pytest.raises(MemoryFault, match="after free|unallocated|freed"):
        t[0:16].read(16)


def test_a_negative_count_faults_through_the_window_as_on_the_general_path():
    dev = Device(A2)
    t = _tensor(dev, np.arange(64, dtype=np.float32))
    t[0:8].read(8)
    assert t.window() is not None
    with pytest.raises(MemoryFault, match="negative access length"):
        t[8:16].read(-4)


def test_a_slice_starting_before_its_view_reads_and_writes_the_allocation_as_the_general_path():
    # a view inside its allocation (elements 32..63 of 64): a slice starting before it is inside
    # the allocation, so it is legal; the window (which starts at the view) must not wrap around
    from opsim.simulator.tile import GlobalSlice
    dev = Device(A2)
    addr = dev.malloc(64 * 4)
    dev.write(addr, np.arange(64, dtype=np.float32))
    t = GlobalTensor.contiguous(dev, addr + 32 * 4, nx.FP32, (32,))
    t[0:8].read(8)
    assert t.window() is not None
    np.testing.assert_array_equal(GlobalSlice(t, -8, 4).read(4), np.arange(24, 28, dtype=np.float32))
    GlobalSlice(t, -8, 4).write(np.full(4, -7, np.float32))
    got = dev.read(addr, 64 * 4).view(np.float32)
    np.testing.assert_array_equal(got[24:28], np.full(4, -7, np.float32))
    np.testing.assert_array_equal(got[56:60], np.arange(56, 60, dtype=np.float32))
