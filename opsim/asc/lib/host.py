"""``asc.lib.host``: the host-side matmul tiling helper (``MultiCoreMatmulTiling``).

The split is opsim's own, in the spirit of the vendor helper: the M x N output is cut into
``used_core_num`` single-core blocks (multiples of 16) that balance the work over the cores
given to ``set_dim``; each block is computed in base tiles (``base_m`` x ``base_n``, fixed with
``set_fix_split`` or chosen to fit L0A/L0B/L0C twice over) along K in ``base_k`` slices, ``step_k``
slices per L1 load. On a mixed kernel ``set_dim`` counts vector cores (each one a Matmul client).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any

from opsim.asc.enums import CubeFormat, TPosition  # noqa: F401 - re-exported as host.TPosition/CubeFormat


class DataType(IntEnum):
    DT_FLOAT = 0
    DT_FLOAT16 = 1
    DT_INT8 = 2
    DT_INT32 = 3
    DT_BF16 = 27


class MatrixTraverse(IntEnum):
    NOSET = 0
    FIRSTM = 1
    FIRSTN = 2


_ITEMSIZE = {DataType.DT_FLOAT: 4, DataType.DT_FLOAT16: 2, DataType.DT_BF16: 2, DataType.DT_INT8: 1,
             DataType.DT_INT32: 4}


class PlatformAscendC:
    """The platform a tiling is planned for (the device chosen with opsim.asc.set_device)."""

    def __init__(self, device: Any = None) -> None:
        from opsim.api import device_spec
        from opsim.asc.jit import get_device
        self.spec = device_spec(device or get_device())

    def get_core_num_aic(self) -> int:
        return self.spec.cores.aic

    def get_core_num_aiv(self) -> int:
        return self.spec.cores.aiv


def get_ascendc_platform(device: Any = None) -> PlatformAscendC:
    return PlatformAscendC(device)


def _a16(x: int) -> int:
    return -(-int(x) // 16) * 16


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


class MultiCoreMatmulTiling:
    """``host.MultiCoreMatmulTiling(platform)``: set types, dim, shapes; ``get_tiling(tiling)``."""

    def __init__(self, platform: PlatformAscendC | None = None) -> None:
        self.platform = platform or PlatformAscendC()
        self.a_type = self.b_type = (TPosition.GM, CubeFormat.ND, DataType.DT_FLOAT16, False)
        self.c_type = (TPosition.GM, CubeFormat.ND, DataType.DT_FLOAT)
        self.bias_type = (TPosition.GM, CubeFormat.ND, DataType.DT_FLOAT)
        self.dim = 1
        self.shape = self.org_shape = (0, 0, 0)
        self.bias = False
        self.fix_split = (-1, -1, -1)
        self.traverse = MatrixTraverse.FIRSTM

    def set_a_type(self, pos: Any, fmt: Any, dtype: Any, is_trans: bool = False) -> int:
        self.a_type = (pos, fmt, DataType(dtype), bool(is_trans))
        return 0

    def set_b_type(self, pos: Any, fmt: Any, dtype: Any, is_trans: bool = False) -> int:
        self.b_type = (pos, fmt, DataType(dtype), bool(is_trans))
        return 0

    def set_c_type(self, pos: Any, fmt: Any, dtype: Any) -> int:
        self.c_type = (pos, fmt, DataType(dtype))
        return 0

    def set_bias_type(self, pos: Any, fmt: Any, dtype: Any) -> int:
        self.bias_type = (pos, fmt, DataType(dtype))
        return 0

    def set_dim(self, dim: int) -> int:
        if int(dim) < 1:
            return -1
        self.dim = int(dim)
        return 0

    def set_org_shape(self, m: int, n: int, k: int, *args: int) -> int:
        self.org_shape = (int(m), int(n), int(k))
        return 0

    def set_shape(self, m: int, n: int, k: int) -> int:
        self.shape = (int(m), int(n), int(k))
        return 0

    def enable_bias(self, enable: bool = True) -> int:
        self.bias = bool(enable)
        return 0

    def set_bias(self, enable: bool = True) -> int:
        return self.enable_bias(enable)

    def set_buffer_space(self, l1: int = -1, l0c: int = -1, ub: int = -1, *args: int) -> int:
        return 0

    def set_traverse(self, traverse: Any) -> int:
        self.traverse = MatrixTraverse(traverse)
        return 0

    def set_fix_split(self, base_m: int = -1, base_n: int = -1, base_k: int = -1) -> int:
        self.fix_split = (int(base_m), int(base_n), int(base_k))
        return 0

    def _split(self, m: int, n: int) -> tuple[int, int]:
        """single-core (m, n): balance the M x N blocks over ``dim`` cores (fewest max block
        area, then the least operand traffic, then fewer cores)."""
        best = None
        for mb in range(1, self.dim + 1):
            nb = max(1, self.dim // mb)
            scm, scn = _a16(_cdiv(m, mb)), _a16(_cdiv(n, nb))
            used = _cdiv(m, scm) * _cdiv(n, scn)
            key = (scm * scn, scm + scn, used)
            if best is None or key < best[0]:
                best = (key, scm, scn)
        assert best is not None             # dim >= 1: the loop ran at least once
        return best[1], best[2]

    def get_tiling(self, tiling: Any) -> int:
        """Fill ``tiling`` (an ``asc.adv.TCubeTiling``); 0 on success, -1 if it cannot fit."""
        from opsim.asc.adv import TCubeTiling
        m, n, k = self.shape if all(self.shape) else self.org_shape
        if min(m, n, k) <= 0:
            return -1
        spec = self.platform.spec
        item = _ITEMSIZE[self.a_type[2]]
        scm, scn = self._split(m, n)
        fm, fn, fk = self.fix_split
        base_m = fm if fm > 0 else min(128, scm)
        base_n = fn if fn > 0 else min(128, scn)
        base_k = fk if fk > 0 else 64 if item == 2 else 32
        l0a = spec.l0a.size if spec.l0a is not None else 65536
        l0b = spec.l0b.size if spec.l0b is not None else 65536
        l0c = spec.l0c.size if spec.l0c is not None else 131072
        while base_k > 16 and (base_m * base_k * item * 2 > l0a or base_k * base_n * item * 2 > l0b):
            base_k //= 2
        if base_m * base_n * 4 > l0c or base_m * base_k * item > l0a or base_k * base_n * item > l0b:
            return -1
        step_k = max(1, min(4, _cdiv(k, base_k)))
        values = dict(used_core_num=_cdiv(m, scm) * _cdiv(n, scn), m=m, n=n, k_a=k, k_b=k, single_core_m=scm,
                      single_core_n=scn, single_core_k=k, base_m=base_m, base_n=base_n, base_k=base_k,
                      step_m=1, step_n=1, step_ka=step_k, step_kb=step_k, depth_a1=2 * step_k, depth_b1=2 * step_k,
                      is_bias=int(self.bias), iterate_order=0 if self.traverse != MatrixTraverse.FIRSTN else 1,
                      db_l0c=2 if base_m * base_n * 4 * 2 <= l0c else 1)
        if not isinstance(tiling, TCubeTiling):
            raise TypeError(f"get_tiling fills an asc.adv.TCubeTiling, got {type(tiling).__name__}")
        tiling.fill(**values)
        return 0
