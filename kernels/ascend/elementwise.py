"""Tiling shared by the element-wise backward operators (MSE, BCE) on Ascend vector cores.

The MseLossGradV2 tiling (docs/sources.md#mse-tiling): UB is divided per element among the input buffers,
the output buffer and fp32 calculation buffers; ``max_tile`` elements fit with single
buffering; ``block_dim = min(vector cores, ceil(total / max_tile))``; work is split evenly with
the remainder on the last core; double buffering switches on above 65536 elements and halves
the tile. Overrides (block_dim, tile_length, buffer_num, core_mask) let studies force a tiling;
one that does not fit the UB is refused with the bytes needed and available.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from opsim.devices.spec import DeviceSpec
from opsim.kernels.common import OpError, ACLNN_ERR_PARAM_INVALID, plain_overrides, popcount, tiling_error
from opsim.simulator.cargs import core_mask_problem

DOUBLE_BUFFER_THRESHOLD = 65536   # elements (docs/sources.md#mse-tiling)
ALIGN_ELEMENTS = 32               # tiles are kept to whole 32-element groups (32 B for int8+)
OVERRIDE_KEYS = ("block_dim", "tile_length", "buffer_num", "core_mask")


@dataclass(frozen=True)
class ElementwiseTiling:
    total: int            # elements of the output
    block_dim: int
    per_core: int         # elements on every core but the last
    last_core: int        # elements on the last core (per_core + remainder)
    tile_length: int      # elements per tile
    buffer_num: int       # 1 or 2 (double buffering)
    ub_bytes: int         # UB bytes one core allocates
    ub_bytes_per_element: int
    core_mask: int | None = None
    workspace: int = 0

    def core_range(self, block: int) -> tuple[int, int]:
        start = block * self.per_core
        return start, self.last_core if block == self.block_dim - 1 else self.per_core


def check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    overrides = plain_overrides(overrides)
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"unknown tiling override(s) {sorted(unknown)}; allowed: {', '.join(OVERRIDE_KEYS)}")
    for key, value in overrides.items():
        # 1.0 or True would otherwise pass `in (1, 2)` and be taken as 1 (a numpy integer is an
        # int by now); core_mask has the check every core mask shares (plan_elementwise)
        if key != "core_mask" and (isinstance(value, bool) or not isinstance(value, int)):
            raise tiling_error(f"tiling override {key} = {value!r} must be an integer")
    return overrides


def plan_elementwise(spec: DeviceSpec, total: int, *, n_inputs: int, in_itemsize: int, out_itemsize: int,
                     calc_bytes: int, overrides: Mapping[str, Any] | None = None) -> ElementwiseTiling:
    """The V2 element-wise tiling for ``total`` output elements.

    Per element of a tile the UB holds ``n_inputs`` input slots and one output slot per buffer,
    plus ``calc_bytes`` of fp32 scratch (casts of 16-bit inputs).
    """
    ov = check_overrides(overrides)
    assert spec.ub is not None          # an Ascend spec: the UB is required (devices/spec.py)
    ub = spec.ub.size
    cores = spec.vector_cores

    def per_element(buffers: int) -> int:
        return buffers * (n_inputs * in_itemsize + out_itemsize) + calc_bytes

    max_tile = (ub // per_element(1)) // ALIGN_ELEMENTS * ALIGN_ELEMENTS
    core_mask = ov.get("core_mask")
    if core_mask is not None:
        problem = core_mask_problem(core_mask, cores, "vector", spec.name)
        if problem:
            raise tiling_error(problem)
        core_mask = int(core_mask)          # a numpy integer as the int the tiling records
        cores = popcount(core_mask)
    buffer_num = ov.get("buffer_num", 2 if total > DOUBLE_BUFFER_THRESHOLD else 1)
    if buffer_num not in (1, 2):
        raise tiling_error(f"buffer_num {buffer_num!r} must be 1 or 2")
    if "tile_length" in ov:
        tile = ov["tile_length"]
        if not isinstance(tile, int) or tile <= 0:
            raise tiling_error(f"tile_length {tile!r} must be a positive number of elements")
        pad = -(-tile // ALIGN_ELEMENTS) * ALIGN_ELEMENTS
        need = pad * per_element(buffer_num)
        if need > ub:
            raise tiling_error(
                f"tile_length {tile} does not fit the UB: needs {need} B "
                f"({per_element(buffer_num)} B per element x {pad} elements, buffer_num {buffer_num}), "
                f"UB has {ub} B on {spec.name}")
    else:
        tile = max(ALIGN_ELEMENTS, (ub // per_element(buffer_num)) // ALIGN_ELEMENTS * ALIGN_ELEMENTS)
        need = tile * per_element(buffer_num)
        if max_tile > 0 and need > ub:
            # a what-if UB holding one aligned tile with one buffer but not with two: refused here,
            # not as a CapacityError on a core once the run has started
            raise tiling_error(
                f"tile_length {ALIGN_ELEMENTS} (the smallest tile) does not fit the UB with buffer_num "
                f"{buffer_num}: needs {need} B ({per_element(buffer_num)} B per element), UB has {ub} B on "
                f"{spec.name}; buffer_num 1 needs {tile * per_element(1)} B")
    if max_tile <= 0:
        raise tiling_error(f"UB of {ub} B cannot hold one {ALIGN_ELEMENTS}-element tile "
                           f"({per_element(1)} B per element)")
    if "block_dim" in ov:
        block_dim = ov["block_dim"]
        if not isinstance(block_dim, int) or block_dim <= 0:
            raise tiling_error(f"block_dim {block_dim!r} must be a positive integer")
        block_dim = min(block_dim, max(1, total))
    else:
        block_dim = max(1, min(cores, -(-total // max_tile)))
    per_core = total // block_dim
    last = per_core + total % block_dim
    tile = min(tile, max(last, 1)) if "tile_length" not in ov else tile
    pad = -(-tile // ALIGN_ELEMENTS) * ALIGN_ELEMENTS
    return ElementwiseTiling(total, block_dim, per_core, last, tile, buffer_num,
                             pad * per_element(buffer_num), per_element(buffer_num), core_mask)


def estimate_elementwise(spec: DeviceSpec, tiling: ElementwiseTiling, work: Any) -> Any:
    """Closed-form estimate of this tiling (kernels.analytic): ``work(n)`` is the TileWork of
    one tile of ``n`` elements (its copies and vector instructions)."""
    from opsim.kernels.analytic import pipeline_estimate
    cores = popcount(tiling.core_mask) if tiling.core_mask else spec.vector_cores
    return pipeline_estimate(spec, block_dim=tiling.block_dim, per_core=tiling.per_core,
                             last_core=tiling.last_core, tile_length=tiling.tile_length,
                             buffer_num=tiling.buffer_num, work=work, cores=cores,
                             ub_bytes=tiling.ub_bytes, workspace_bytes=tiling.workspace)
