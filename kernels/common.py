"""What every operator shares: status codes, OpError, tensor descriptors, checks, OpDef.

An operator module defines an :class:`OpDef` whose functions read top to bottom as the real
operator does: ``validate`` (the documented checks in the documented order, raising
:class:`OpError` with the aclnn status code), ``plan`` (a pure tiling function of the spec,
shapes, dtypes and overrides), ``launch`` (queue the per-core kernels on a stream), ``golden``
(an independent numpy reference in the documented op order). The aclnn two-phase entry points,
``opsim.run``, the demo and the studies are generic over OpDefs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.simulator import numerics as nx
from opsim.simulator.cargs import is_int

# aclnn status codes (docs/sources.md#aclnn-status-codes)
ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001
ACLNN_ERR_INNER = 561000
ACLNN_ERR_INNER_TILING_ERROR = 561002
ACLNN_ERR_INNER_NULLPTR = 561103

ACL_FORMAT_ND = 2
# aclFormat values (docs/sources.md#acl-enums)
FORMAT_NAMES = {-1: "UNDEFINED", 0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z",
                12: "NC1HWC0_C04", 16: "HWCN", 27: "NDHWC", 29: "FRACTAL_NZ", 30: "NCDHW",
                32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 35: "NC", 47: "NCL", 50: "FRACTAL_NZ_C0_16",
                51: "FRACTAL_NZ_C0_32", 52: "FRACTAL_NZ_C0_2", 53: "FRACTAL_NZ_C0_4", 54: "FRACTAL_NZ_C0_8"}
# the private (device-tiled) formats of op::IsPrivateFormat (docs/sources.md#private-formats); every
# other format (NCHW, NHWC, NCL, NCDHW, ...) is a plain row-major layout like ND
PRIVATE_FORMATS = frozenset({3, 4, 12, 29, 32, 33, 50, 51, 52, 53, 54})

# product series names used in device files, and how the seeds name them
SERIES_NAMES = {
    "training": "Atlas training series",
    "inference": "Atlas inference series",
    "a2": "Atlas A2 training series / Atlas 800I A2",
    "a3": "Atlas A3 training / inference series",
    "200i-500-a2": "Atlas 200I/500 A2 inference products",
    "ft78ne": "FT78NE DSP",
    "mt7004": "MT7004 DSP",
}

MAX_DIMS = 8


class OpError(Exception):
    """An operator call rejected with an aclnn status code and a message naming the problem."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple:
        return (OpError, (self.code, self.message))


@dataclass(frozen=True)
class TensorDesc:
    """Shape, dtype and layout of an operand: what validation and planning look at."""

    shape: tuple[int, ...]
    dtype: nx.DType
    strides: tuple[int, ...] | None = None   # elements; None = contiguous
    format: int = ACL_FORMAT_ND

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{list(self.shape)} {self.dtype}"


def desc_of(value: Any) -> TensorDesc:
    """A TensorDesc for a numpy array, an opsim TensorSpec-like object, or a TensorDesc."""
    if isinstance(value, TensorDesc):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return TensorDesc(tuple(int(s) for s in value.shape), nx.dtype(value.dtype))
    raise TypeError(f"expected an array or a TensorSpec, got {type(value).__name__}")


# -- checks (each raises OpError with the parameter, the value and what is allowed) ---------------

def check_not_null(**tensors: Any) -> None:
    for name, t in tensors.items():
        if t is None:
            raise OpError(ACLNN_ERR_PARAM_NULLPTR, f"{name} is a null pointer; it is required")


def check_max_dims(max_dims: int = MAX_DIMS, **tensors: TensorDesc | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.ndim > max_dims:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has {t.ndim} dimensions (shape {list(t.shape)}); at most {max_dims} are supported")


def check_dtype_in(allowed: Iterable[str], product: str, **tensors: TensorDesc | None) -> None:
    allowed = tuple(allowed)
    for name, t in tensors.items():
        if t is not None and t.dtype.name not in allowed:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has dtype {acl_dtype_name(t.dtype)}; {product} supports "
                          f"{', '.join(acl_dtype_name(nx.dtype(a)) for a in allowed)}")


def check_same_dtype(ref_name: str, ref: TensorDesc, **tensors: TensorDesc | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.dtype != ref.dtype:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has dtype {acl_dtype_name(t.dtype)}; it must equal {ref_name}'s dtype "
                          f"{acl_dtype_name(ref.dtype)}")


def check_format_nd(**tensors: TensorDesc | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.format != ACL_FORMAT_ND:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has format {FORMAT_NAMES.get(t.format, t.format)}; only ND is supported")


def check_format_not_private(**tensors: TensorDesc | None) -> None:
    """The library's ``IsPrivateFormat`` check: a plain layout (ND, NCHW, NCL, ...) passes, a
    private tiled one is refused ("Format only support ND")."""
    for name, t in tensors.items():
        if t is not None and t.format in PRIVATE_FORMATS:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has format {FORMAT_NAMES.get(t.format, t.format)}, a private format; only "
                          f"ND and the other plain formats ({', '.join(FORMAT_NAMES[f] for f in (0, 1, 30, 35, 47))}"
                          f", ...) are supported")


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes, or None if they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def broadcasts_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    return len(src) <= len(dst) and broadcast_shapes(src, dst) == tuple(dst)


REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
REDUCTION_NAMES = {0: "none", 1: "mean", 2: "sum"}


def reduction_code(value: Any) -> int:
    """0/1/2 or "none"/"mean"/"sum" → the int64 code; any other integer is passed through for
    check_reduction; anything that is not an integer (None, 1.5, NaN, a bool) is refused here
    rather than truncated."""
    if isinstance(value, str):
        key = value.lower()
        if key not in REDUCTIONS:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"reduction {value!r} is not one of 0 (none), 1 (mean), 2 (sum)")
        return REDUCTIONS[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OpError(ACLNN_ERR_PARAM_INVALID, f"reduction {value!r} must be an integer 0 (none), 1 (mean) or "
                                               f"2 (sum), or one of 'none', 'mean', 'sum'")
    return int(value)


def check_reduction(reduction: int) -> None:
    if reduction not in (0, 1, 2):
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"reduction is {reduction}; expected reduction to be between 0 and 2 "
                      f"(0 none, 1 mean, 2 sum)")


def check_product(spec: DeviceSpec, op: str, supported: Iterable[str]) -> None:
    supported = tuple(supported)
    if spec.series not in supported:
        raise OpError(ACLNN_ERR_RUNTIME_ERROR,
                      f"{op} is not supported on {SERIES_NAMES.get(spec.series, spec.series)} "
                      f"({spec.name}); supported products: "
                      f"{', '.join(SERIES_NAMES.get(s, s) for s in supported)}")


def acl_dtype_name(dt: nx.DType) -> str:
    return {"fp32": "FLOAT", "fp16": "FLOAT16", "bf16": "BFLOAT16", "fp64": "DOUBLE", "int8": "INT8",
            "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
            "bool": "BOOL"}.get(dt.name, dt.name.upper())


def tiling_error(message: str) -> OpError:
    return OpError(ACLNN_ERR_INNER_TILING_ERROR, message)


def plain_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a call's tiling ``overrides`` with every numpy integer as the int it equals.

    Each plan reads its overrides through this, so that a sweep over ``np.arange`` runs as the
    int call does: the int enters the tiling, the trace and the run's record, where a numpy
    scalar would show as ``np.int64(2)``. A bool, a float or a string is left as it is, for the
    plan's own check to refuse by name (True would otherwise run as 1)."""
    return {key: int(value) if is_int(value) else value for key, value in (overrides or {}).items()}


def popcount(x: int) -> int:
    return bin(x).count("1")


@dataclass(frozen=True)
class OpDef:
    """An operator as opsim.run, aclnn, the demo and the studies see it."""

    name: str
    inputs: tuple[str, ...]                 # tensor operands, in aclnn order
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]                # attribute name -> default (required if no default)
    products: tuple[str, ...]               # supported device series
    validate: Callable[..., dict[str, TensorDesc]]   # (spec, descs, attrs) -> output descs
    plan: Callable[..., Any]                # (spec, descs, attrs, overrides) -> tiling
    launch: Callable[..., list]             # (device, stream, tensors, tiling, attrs) -> [Launch]
    golden: Callable[..., dict[str, np.ndarray]]   # (arrays, attrs) -> outputs
    example: Callable[..., dict[str, Any]]  # (rng, spec, dtype, size) -> operands and attrs
    infer: Callable[..., dict[str, TensorDesc | None]] | None = None  # (spec, descs, attrs) -> output descs
    # optional shape-only twin of ``example``: (spec, dtype, shape, **variant) -> {operand:
    # (shape, dtype name), attribute: value}, the same operands and attributes as ``example``
    # without building any data (the CLI's timing and estimate modes, host memory checks)
    example_shapes: Callable[..., dict[str, Any]] | None = None
    optional: tuple[str, ...] = ()
    dtypes: Callable[[DeviceSpec], tuple[str, ...]] = lambda spec: ("fp32",)
    workspace: Callable[[Any], int] = lambda tiling: 0
    summary: str = ""
    required: frozenset = field(default_factory=frozenset)
    # optional closed-form model for mode="estimate": (spec, descs, attrs, tiling) ->
    # kernels.analytic.Estimate; used only for operators listed in opsim.estimate.CLOSED_FORM_KEPT
    # (where it is measurably better), every other operator is estimated by replaying its kernel;
    # it returns None for a call it does not model (then the replay estimates that call too)
    estimate: Callable[..., Any] | None = None
    # optional data-dependent check of a functional run, before anything is launched:
    # (device, {name: GlobalTensor}, attrs) -> None, raising OpError or a simulator fault
    check_data: Callable[..., None] | None = None
    # optional empty-tensor rule (descs) -> bool; default: any input has no elements
    is_empty: Callable[..., bool] | None = None
    # optional operand placement for opsim.run: (device, descs, attrs) -> {name: (addr, memory)}
    # for the operands that do not live in GM (e.g. a DSP core's private memory); ``memory`` has
    # write(addr, data) and read(addr, nbytes). Operands it leaves out are malloc'd in GM.
    place: Callable[..., Mapping[str, tuple[int, Any]]] | None = None
    # optional rewrite of a call's operands and attributes before opsim.run validates it:
    # (spec, operands, attrs, mode) -> (operands, attrs)
    prepare: Callable[..., tuple[dict[str, Any], dict[str, Any]]] | None = None
    # optional documented limits for `opsim capacity`: (spec, dtype or None) -> [CapacityRow]
    documented_limits: Callable[..., Sequence[Any]] | None = None
    # the tiling override keys ``plan`` accepts (opsim.run(tiling=...), a study's tiling.* axes),
    # so that a study with a misspelt key is refused before it runs; None: not declared (a custom
    # operator's keys come from its tiling function), checked only when planning
    tiling_keys: tuple[str, ...] | None = None

    def empty(self, descs: Mapping[str, "TensorDesc | None"]) -> bool:
        """Whether the call has no work: the operator's own rule, else any input without elements."""
        if self.is_empty is not None:
            return self.is_empty(descs)
        return any(d is not None and d.numel == 0 for n, d in descs.items() if n in self.inputs)
