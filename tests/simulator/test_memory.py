"""Behaviour of simulated memories (simulator/memory.py) and of fault messages (errors.py)."""

from __future__ import annotations

import os
import pickle
import resource

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsim.simulator.errors import (
    CapacityError,
    DeadlockError,
    MemoryFault,
    SimulatorError,
    UnsupportedInstruction,
    error_context,
    with_context,
)
from opsim.simulator.memory import PAGE, AddressSpace, Region, align_down, align_up

GM_BASE = 0x12C000000000
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def gm(size: int = 64 * MiB, **kw) -> Region:
    return Region("GM", GM_BASE, size, alignment=32, kind="HBM", **kw)


def ub(size: int = 192 * KiB, **kw) -> Region:
    return Region("UB", 0, size, alignment=32, kind="on-chip", **kw)


def dsp_private(capacity: int | None = None) -> Region:
    # docs/sources.md#dsp-addresses: the seed places private L2 at 0x10000000; window of 128 MiB (assumption).
    return Region("PRIVATE", 0x10000000, 0x08000000, alignment=8, backing="sparse",
                  capacity=capacity)


# --- helpers ----------------------------------------------------------------------------------

def test_align_helpers_round_to_multiples():
    assert align_up(0, 32) == 0
    assert align_up(1, 32) == 32
    assert align_up(64, 32) == 64
    assert align_down(63, 32) == 32
    assert align_up(10, 12) == 12  # not only powers of two


# --- allocator --------------------------------------------------------------------------------

def test_allocations_are_aligned_and_sizes_rounded_up():
    region = ub()
    a = region.allocate(10, name="a")
    b = region.allocate(33, name="b")
    c = region.allocate(8, align=512)
    assert a.addr % 32 == 0 and b.addr % 32 == 0 and c.addr % 512 == 0
    assert (a.nbytes, a.size) == (10, 32)
    assert b.addr == a.addr + 32 and b.size == 64
    assert region.allocated_bytes == 32 + 64 + 32


def test_first_fit_reuses_freed_block():
    region = ub()
    a = region.allocate(1024)
    b = region.allocate(1024)
    region.allocate(1024)
    region.free(b.addr)
    assert not b.alive
    again = region.allocate(512)  # first hole that fits is b's
    assert again.addr == b.addr
    region.free(a.addr)
    region.free(again.addr)
    big = region.allocate(2048)  # a and b's holes were coalesced
    assert big.addr == a.addr


def test_peak_allocated_bytes_survives_free_and_reset():
    region = ub()
    a = region.allocate(4096)
    region.allocate(4096)
    region.free(a.addr)
    assert region.allocated_bytes == 4096
    region.reset()
    assert region.allocated_bytes == 0
    assert region.peak_allocated_bytes == 8192
    assert region.allocate(192 * KiB).addr == 0  # reset made the whole UB free again


def test_capacity_error_names_buffer_needed_and_available():
    region = ub(size=256 * KiB, capacity=192 * KiB)
    region.allocate(128 * KiB, name="inQueueX")
    with pytest.raises(CapacityError) as info:
        region.allocate(100 * KiB, name="outQueueZ")
    err = info.value
    assert (err.buffer, err.needed, err.available) == ("UB", 100 * KiB, 64 * KiB)
    message = str(err)
    assert "UB" in message and str(100 * KiB) in message and str(64 * KiB) in message
    assert "outQueueZ" in message


def test_capacity_error_available_is_largest_free_block_when_fragmented():
    region = ub(size=4 * KiB)
    blocks = [region.allocate(KiB) for _ in range(4)]
    region.free(blocks[0].addr)
    region.free(blocks[2].addr)
    with pytest.raises(CapacityError) as info:
        region.allocate(2 * KiB)
    assert info.value.available == KiB
    region.allocate(KiB)  # and that much does fit


def test_double_free_and_invalid_free_are_memory_faults_naming_the_address():
    region = gm()
    a = region.allocate(256)
    region.free(a.addr)
    with pytest.raises(MemoryFault, match="double free") as info:
        region.free(a.addr)
    assert hex(a.addr) in str(info.value) and info.value.address == a.addr
    b = region.allocate(256)
    with pytest.raises(MemoryFault, match="invalid free") as info:
        region.free(b.addr + 32)
    assert hex(b.addr + 32) in str(info.value)


# --- access checks ----------------------------------------------------------------------------

def test_out_of_bounds_access_straddling_allocation_end_faults():
    region = gm()
    a = region.allocate(4096, name="x")
    region.view(a.addr + 4096 - 64, 64)  # last 64 B are fine
    with pytest.raises(MemoryFault, match="out of bounds") as info:
        region.view(a.addr + 4096 - 32, 64)
    assert hex(a.addr + 4096 - 32) in str(info.value)
    assert "runs 32 B beyond allocation 'x'" in str(info.value)


def test_padding_after_requested_size_is_out_of_bounds():
    region = gm()
    a = region.allocate(40)  # 64 B reserved
    with pytest.raises(MemoryFault, match="out of bounds"):
        region.read(a.addr, 64)


def test_misaligned_access_faults_with_address():
    region = gm()
    a = region.allocate(1024)
    region.check(a.addr + 64, 32, write=False, align=32)
    with pytest.raises(MemoryFault, match="misaligned") as info:
        region.check(a.addr + 16, 32, write=True, align=32)
    assert hex(a.addr + 16) in str(info.value)


def test_use_after_free_faults_with_address():
    region = gm()
    a = region.allocate(1024, name="tmp")
    region.write(a.addr, b"\x01" * 16)
    region.free(a.addr)
    with pytest.raises(MemoryFault, match="use after free") as info:
        region.read(a.addr + 8, 8)
    assert hex(a.addr + 8) in str(info.value) and "'tmp'" in str(info.value)


def test_use_after_reset_is_reported_as_use_after_free():
    region = ub()
    a = region.allocate(1024)
    region.reset()
    with pytest.raises(MemoryFault, match="use after free"):
        region.view(a.addr, 32, write=True)


def test_unallocated_access_faults_with_address():
    region = gm()
    a = region.allocate(1024, name="x")
    addr = GM_BASE + 1 * MiB
    with pytest.raises(MemoryFault, match="unallocated") as info:
        region.write(addr, b"\x00")
    assert hex(addr) in str(info.value)
    with pytest.raises(MemoryFault, match="0 B past the end of allocation 'x'"):
        region.read(a.addr + 1024, 64)  # off by one buffer: the message names the buffer


def test_access_outside_region_faults():
    region = ub()
    with pytest.raises(MemoryFault, match="outside the region"):
        region.check(192 * KiB - 16, 32, write=False)


def test_write_to_read_only_memory_faults():
    region = gm()
    const = region.allocate(64, read_only=True)
    region.read(const.addr, 64)
    with pytest.raises(MemoryFault, match="read-only"):
        region.write(const.addr, b"\x01")
    rom = Region("ROM", 0, 4096, backing="flat", read_only=True)
    with pytest.raises(MemoryFault, match="read-only"):
        rom.view(0, 4, write=True)


# --- views and backing ------------------------------------------------------------------------

def test_views_are_zero_copy_and_writes_persist():
    region = gm()
    a = region.allocate(256)
    v = region.view(a.addr, 256, write=True)
    v.view(np.float32)[:] = np.arange(64, dtype=np.float32)
    again = region.view(a.addr, 256)
    assert np.shares_memory(v, again)
    np.testing.assert_array_equal(region.read(a.addr + 16, 16).view(np.float32), [4, 5, 6, 7])
    copy = region.read(a.addr, 4)
    copy[:] = 0xFF  # read() returns a copy, not a view
    assert region.read(a.addr, 4).tolist() == [0, 0, 0, 0]


def test_write_accepts_bytes_and_arrays_of_any_dtype_as_raw_bytes():
    region = ub()
    a = region.allocate(64)
    region.write(a.addr, np.array([1.0, -2.0], dtype=np.float16))
    region.write(a.addr + 32, b"\xaa\xbb")
    assert region.read(a.addr, 4).tobytes() == np.array([1.0, -2.0], np.float16).tobytes()
    assert region.read(a.addr + 32, 2).tobytes() == b"\xaa\xbb"


def test_fresh_allocation_reads_zeros_without_backing_it():
    region = gm()
    a = region.allocate(1 * MiB)
    assert not region.read(a.addr, 1 * MiB).any()
    assert region.backed_bytes == 0
    view = region.view(a.addr, 64)
    assert not view.flags.writeable  # a read view of unbacked memory cannot swallow writes


def test_huge_region_and_allocation_are_backed_lazily():
    # 64 GiB of HBM with one 48 GiB tensor: only the page written is backed.
    region = gm(size=64 * GiB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    a = region.allocate(48 * GiB, name="huge")
    addr = a.addr + 40 * GiB + 123 * 32
    region.write(addr, np.arange(16, dtype=np.int32))
    np.testing.assert_array_equal(region.read(addr, 64).view(np.int32), np.arange(16))
    assert not region.read(a.addr, 4096).any()
    assert region.backed_bytes == PAGE
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024  # far below even 64 MiB of host memory


def test_shared_write_keeps_the_host_array_and_copies_it_on_the_first_device_write():
    region = gm()
    a = region.allocate(256)
    host = np.arange(64, dtype=np.float32)
    region.write(a.addr, host, share=True)
    read_view = region.view(a.addr, 256)
    assert np.shares_memory(read_view, host)              # no copy-in
    assert not read_view.flags.writeable
    assert region.backed_bytes == 256
    region.view(a.addr + 4, 4, write=True).view(np.float32)[0] = -1.0
    np.testing.assert_array_equal(host, np.arange(64, dtype=np.float32))   # the host's bytes untouched
    got = region.read(a.addr, 256).view(np.float32)
    assert got[1] == -1.0 and got[0] == 0.0 and got[63] == 63.0
    assert not np.shares_memory(region.view(a.addr, 256), host)
    np.testing.assert_array_equal(read_view.view(np.float32), np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("size", [64 * KiB, 64 * MiB + 4 * KiB])   # one dense array / page-granule store
def test_shared_write_behaves_like_a_copying_write(size):
    host = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    region_s, region_c = gm(size=256 * MiB), gm(size=256 * MiB)
    a_s, a_c = region_s.allocate(size), region_c.allocate(size)
    region_s.write(a_s.addr, host, share=True)
    region_c.write(a_c.addr, host)
    assert AddressSpace([region_s]).snapshot_digest() == AddressSpace([region_c]).snapshot_digest()
    for region, alloc in ((region_s, a_s), (region_c, a_c)):
        region.write(alloc.addr + size - 40, b"\x07" * 8)
        region.view(alloc.addr + 32, 8, write=True)[:] = 9
    assert AddressSpace([region_s]).snapshot_digest() == AddressSpace([region_c]).snapshot_digest()
    assert region_s.read(a_s.addr, size).tobytes() == region_c.read(a_c.addr, size).tobytes()
    np.testing.assert_array_equal(host, np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8))


def test_shared_write_copies_when_it_does_not_fill_a_fresh_allocation():
    region = gm()
    a = region.allocate(256)
    part = np.ones(128, np.uint8)
    region.write(a.addr, part, share=True)                 # part of the allocation: copied
    assert not np.shares_memory(region.view(a.addr, 128), part)
    whole = np.full(256, 2, np.uint8)
    region.write(a.addr, whole, share=True)                # already backed: copied over
    assert not np.shares_memory(region.view(a.addr, 256), whole)
    assert region.read(a.addr, 256).tolist() == [2] * 256
    ro = gm(read_only=True)
    with pytest.raises(MemoryFault, match="read-only"):
        ro.write(ro.allocate(64).addr, np.zeros(64, np.uint8), share=True)


def test_read_without_copy_is_a_view_of_the_memory():
    region = gm()
    a = region.allocate(64)
    region.write(a.addr, np.arange(64, dtype=np.uint8))
    v = region.read(a.addr + 8, 8, copy=False)
    assert v.tolist() == list(range(8, 16))
    region.write(a.addr + 8, b"\xff")
    assert v[0] == 0xFF
    fresh = region.allocate(64)
    assert not region.read(fresh.addr, 64, copy=False).any()
    assert region.backed_bytes == 64                       # reading did not back the fresh one


def test_flat_region_allows_any_in_range_access_and_keeps_bookkeeping():
    l1 = Region("L1", 0, 512 * KiB, backing="flat")
    l1.write(12345, b"xyz")
    assert l1.read(12345, 3).tobytes() == b"xyz"
    a = l1.allocate(1000)
    assert l1.allocated_bytes == 1024 and a.alive


def test_flat_typed_views_alias_the_memory_until_reset():
    ub = Region("UB", 0, 192 * KiB, backing="flat")
    unbacked = ub.typed_view(256, 32, np.dtype(np.float32))
    assert not unbacked.any() and not unbacked.flags.writeable   # a read does not back it
    out = ub.typed_view(256, 32, np.dtype(np.float32), write=True)
    out[...] = np.arange(8, dtype=np.float32)
    again = ub.typed_view(256, 32, np.dtype(np.float32))          # the same buffer, next tile
    assert again.flags.writeable and again.tolist() == list(range(8))
    ub.write(256, np.float32([-1.0]))                             # a write by another path shows
    assert again[0] == -1.0 and ub.typed_view(256, 32, np.dtype(np.float32))[0] == -1.0
    assert ub.typed_view(256, 32, np.dtype(np.int32))[1] == np.float32(1.0).view(np.int32)
    ub.reset()                                                    # bytes discarded: zeros again
    fresh = ub.typed_view(256, 32, np.dtype(np.float32), write=True)
    assert not fresh.any()
    fresh[0] = 5.0
    assert again[0] == -1.0 and ub.read(256, 4).view(np.float32)[0] == 5.0


def test_read_only_flat_typed_view_still_faults_on_write():
    rom = Region("ROM", 0, 4 * KiB, backing="flat", read_only=True)
    assert not rom.typed_view(0, 16, np.dtype(np.float32)).any()
    for _ in range(2):
        with pytest.raises(MemoryFault, match="read-only"):
            rom.typed_view(0, 16, np.dtype(np.float32), write=True)
    with pytest.raises(MemoryFault, match="outside"):
        Region("UB", 0, 4 * KiB, backing="flat").typed_view(4 * KiB - 8, 16, np.dtype(np.float32))


# --- sparse (address-based DSP) memory --------------------------------------------------------

def test_sparse_window_accepts_writes_anywhere_without_allocation():
    private = dsp_private()
    private.write(0x10000000, np.float32([1.5, 2.5]))
    private.write(0x13000000, b"\x07" * 100)
    np.testing.assert_array_equal(private.read(0x10000000, 8).view(np.float32), [1.5, 2.5])
    assert private.read(0x13000000, 100).tolist() == [7] * 100
    assert private.backed_bytes == 2 * PAGE
    with pytest.raises(MemoryFault, match="outside"):
        private.write(0x18000000, b"\x00")


def test_sparse_unwritten_bytes_read_as_zeros():
    private = dsp_private()
    private.write(0x10001000, b"\x01\x02")
    assert not private.read(0x12345670, 64).any()
    # a read straddling written and unwritten bytes
    assert private.read(0x10000ffe, 6).tolist() == [0, 0, 1, 2, 0, 0]


def test_sparse_segments_merge_into_one_contiguous_view():
    private = dsp_private()
    private.write(0x10000000, b"\x01" * 8)
    private.write(0x10003000, b"\x03" * 8)
    view = private.view(0x10000000, 0x3008, write=True)  # spans both and the gap
    assert view.flags.writeable and view.flags.c_contiguous
    assert view[:8].tolist() == [1] * 8 and view[0x3000:].tolist() == [3] * 8
    assert not view[8:0x3000].any()
    view[100] = 42
    assert private.read(0x10000064, 1)[0] == 42
    assert len(list(private.backed_pieces())) == 1
    assert private.backed_bytes == 4 * PAGE


def test_sparse_sequential_writes_extend_in_place_without_staling_views():
    private = dsp_private()
    first = private.view(0x10000000, PAGE, write=True)
    private.view(0x10000000 + PAGE, PAGE, write=True)  # merge: grows with a reserve
    grown = private.view(0x10000000, 2 * PAGE, write=True)
    private.view(0x10000000 + 2 * PAGE, PAGE, write=True)  # lands in the reserve
    grown[0] = 9
    assert private.read(0x10000000, 1)[0] == 9
    assert private.backed_bytes == 3 * PAGE
    del first


def test_sparse_capacity_is_counted_in_4kib_granules():
    private = dsp_private(capacity=3 * PAGE)
    private.write(0x10000000, b"\x01")  # one byte backs one granule
    private.write(0x11000000, b"\x01")
    private.write(0x12000000 + PAGE - 1, b"\x01")
    assert private.backed_bytes == 3 * PAGE
    private.write(0x11000010, b"\x02" * 100)  # same granule: free
    with pytest.raises(CapacityError) as info:
        private.write(0x13000000, b"\x01")
    assert (info.value.buffer, info.value.needed, info.value.available) == (
        "PRIVATE", 4 * PAGE, 3 * PAGE)
    assert private.read(0x13000000, 1)[0] == 0  # nothing was backed by the failed write


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20 * PAGE), st.integers(1, 3 * PAGE),
                          st.integers(1, 255)), max_size=25))
def test_sparse_memory_behaves_like_a_flat_byte_array(writes):
    base = 0x10000000
    private = dsp_private()
    model = np.zeros(24 * PAGE, np.uint8)
    for offset, length, value in writes:
        private.view(base + offset, length, write=True)[:] = value
        model[offset:offset + length] = value
    np.testing.assert_array_equal(private.read(base, model.size), model)
    touched = {page for offset, length, _ in writes
               for page in range(offset // PAGE, (offset + length - 1) // PAGE + 1)}
    assert private.backed_bytes == len(touched) * PAGE
    pieces = list(private.backed_pieces())
    assert all(a[0] + a[1].size < b[0] for a, b in zip(pieces, pieces[1:]))  # merged when touching


# --- address spaces ---------------------------------------------------------------------------

def dsp_space() -> AddressSpace:
    return AddressSpace([
        Region("DDR", 0xA0000000, 0x20000000, alignment=8, backing="allocation"),
        dsp_private(),
        Region("SMC", 0x0C000000, 6 * MiB, alignment=8, backing="flat"),
    ], name="ft78ne")


def test_address_space_routes_addresses_to_their_region():
    space = dsp_space()
    assert [r.name for r in space.regions] == ["SMC", "PRIVATE", "DDR"]
    assert space.region_of(0x10000010).name == "PRIVATE"
    assert space.region_of(0xA0000000, 64).name == "DDR"
    assert space.region("SMC").base == 0x0C000000
    space.write(0x0C000100, b"hello")
    assert space.read(0x0C000100, 5).tobytes() == b"hello"
    ddr = space.region("DDR").allocate(64)
    space.write(ddr.addr, b"\x05" * 64)
    assert space.view(ddr.addr, 64).tolist() == [5] * 64


def test_unmapped_address_faults():
    space = dsp_space()
    with pytest.raises(MemoryFault, match="unmapped") as info:
        space.read(0x20000000, 4)
    assert "0x20000000" in str(info.value)
    with pytest.raises(MemoryFault, match="unmapped"):  # runs off the end of SMC
        space.check(0x0C000000 + 6 * MiB - 2, 4, write=False)


def test_overlapping_regions_are_rejected_naming_both():
    space = dsp_space()
    with pytest.raises(ValueError, match="L2X.*overlaps region PRIVATE"):
        space.add(Region("L2X", 0x17FFF000, 0x2000, backing="flat"))
    space.add(Region("L2Y", 0x18000000, 0x2000, backing="flat"))  # adjacent is fine


# --- snapshot digest --------------------------------------------------------------------------

def populated_space() -> tuple[AddressSpace, int, int]:
    space = dsp_space()
    ddr = space.region("DDR")
    x = ddr.allocate(3 * PAGE, name="x")
    out = ddr.allocate(PAGE, name="out")
    space.write(x.addr, np.arange(3 * PAGE, dtype=np.uint8))
    space.write(0x10002000, b"\x11" * 32)
    space.write(0x0C000000, b"\x22" * 32)
    return space, x.addr, out.addr


def test_digest_changes_when_any_byte_outside_exclusions_changes():
    space, x, out = populated_space()
    exclude = [(out, PAGE)]
    before = space.snapshot_digest(exclude)
    for addr in (x + 5, x + 2 * PAGE + 7, 0x10002000, 0x0C000010, 0x10005000, 0x0C100000):
        old = space.read(addr, 1).copy()
        space.write(addr, old ^ 0x80)
        assert space.snapshot_digest(exclude) != before, hex(addr)
        space.write(addr, old)
        assert space.snapshot_digest(exclude) == before


def test_digest_ignores_changes_inside_exclusions():
    space, x, out = populated_space()
    exclude = [(out, PAGE), (x + 100, 10)]
    before = space.snapshot_digest(exclude)
    space.write(out, np.full(PAGE, 7, np.uint8))
    space.write(x + 100, b"\xff" * 10)
    assert space.snapshot_digest(exclude) == before
    assert space.snapshot_digest() != before


def test_digest_is_address_tagged_so_moving_data_changes_it():
    a, b = dsp_space(), dsp_space()
    a.write(0x10000000, b"\x01")
    b.write(0x10000001, b"\x01")
    assert a.snapshot_digest() != b.snapshot_digest()


def test_digest_depends_on_contents_not_on_how_they_are_backed():
    a, b = dsp_space(), dsp_space()
    a.write(0x10000000, b"\x01")
    a.write(0x10002000, b"\x02")
    b.write(0x10002000, b"\x02")
    b.view(0x10000000, 0x3000, write=True)[0] = 1  # one merged segment instead of two
    b.view(0x11000000, 64, write=True)  # backed but still zero
    assert a.snapshot_digest() == b.snapshot_digest()


# --- error context ----------------------------------------------------------------------------

def test_fault_context_is_filled_by_the_caller_and_shows_in_the_message():
    region = gm()
    a = region.allocate(4096)
    with pytest.raises(MemoryFault) as info:
        try:
            region.view(a.addr + 4096 - 32, 64)
        except SimulatorError as exc:
            raise exc.at(core="core0.veccore1", pipe="MTE2", instruction="DataCopyPad",
                         address=0) from None
    err = info.value
    assert str(err).startswith(
        f"MemoryFault on core0.veccore1 pipe MTE2 in DataCopyPad at {a.addr + 4064:#x}: ")
    assert err.address == a.addr + 4064  # context already known is not overwritten
    assert "out of bounds" in err.reason and err.core == "core0.veccore1"


def test_error_context_manager_and_with_context_fill_missing_fields():
    with pytest.raises(CapacityError, match=r"^CapacityError on dsp3 in vector_malloc: "):
        with error_context(core="dsp3", instruction="vector_malloc"):
            raise CapacityError(buffer="AM", needed=800 * KiB, available=768 * KiB)
    err = with_context(UnsupportedInstruction("no fp16 Exp", dtype="fp16"), core="dsp0")
    assert str(err) == "UnsupportedInstruction on dsp0: no fp16 Exp (dtype fp16)"
    plain = ValueError("x")
    assert with_context(plain, core="dsp0") is plain
    with pytest.raises(TypeError):
        MemoryFault("x").at(cor="typo")


def test_deadlock_error_lists_waiters_and_faults_survive_pickling():
    err = DeadlockError(waiting=["core0 VECTOR wait_flag(MTE2, V, 0)", "core1 SyncAll"])
    assert "waiting: core0 VECTOR wait_flag(MTE2, V, 0), core1 SyncAll" in str(err)
    cap = CapacityError("too big", buffer="UB", needed=2, available=1, core="c0")
    clone = pickle.loads(pickle.dumps(cap))
    assert (type(clone), str(clone), clone.needed) == (CapacityError, str(cap), 2)


def test_a_large_backing_is_fresh_zero_memory_that_the_device_writes_and_reads():
    # backings of _MMAP_MIN bytes or more are anonymous mappings (memory._zeros): zero, writable,
    # alive as long as a view of them is, and written and read like any other backing
    from opsim.simulator import memory
    region = Region("GM", 0, 64 << 20, backing="allocation")
    alloc = region.allocate(8 << 20)
    region.write(alloc.addr + 4096, b"\x01\x02")
    got = region.read(alloc.addr, 8 << 20)
    assert got[4096] == 1 and got[4097] == 2 and int(got.sum()) == 3
    view = region.view(alloc.addr, 8 << 20, write=True)
    assert isinstance(view.base.base, memoryview)        # the mapping, not a calloc'd array
    small = memory._zeros(memory._MMAP_MIN - 1)
    assert small.flags.owndata and not small.any()       # below the threshold: np.zeros
    for n in (memory._MMAP_MIN, memory._THP_MIN, memory._THP_MIN + 5):
        z = memory._zeros(n)
        assert z.nbytes == n and z.flags.writeable and not z.any()
        z[-1] = 7
        del z                                            # unmapped with its last view


def test_backings_made_by_several_threads_are_each_their_own_zeros():
    import threading

    from opsim.simulator import memory
    start = threading.Barrier(8)
    made: list[int] = []

    def make() -> None:
        start.wait()
        for _ in range(10):
            z = memory._zeros(4 << 20)
            assert z.nbytes == 4 << 20 and not z[::65536].any()    # none sees another's writes
            z[::65536] = 1
            made.append(int(z[:65537].sum()))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [2] * 80


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_large_backing_is_not_shared_with_a_forked_child():
    # a multiprocessing worker forked after a run must not write into the parent's outputs
    # (anonymous mappings are MAP_SHARED by Python's default; the backings ask for MAP_PRIVATE)
    from opsim.simulator import memory
    z = memory._zeros(memory._MMAP_MIN)
    z[0] = 1
    pid = os.fork()
    if pid == 0:                        # the child: write, then leave without cleanup
        z[0] = 99
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert z[0] == 1
