"""The basic API: data movement (``data_copy``, ``data_copy_pad``) and the vector instructions.

Each call emits the simulator instruction it stands for (simulator/isa.py, simulator/isa_ext.py)
into the running block's stream; the instruction costs what the device's tables say and
computes in the emulated dtype when it executes. Vector calls take the count form
``op(dst, src..., count)`` and the repeat form ``op(dst, src..., mask, repeat_times,
repeat_params)`` where it covers contiguous elements: one repeat with a continuous mask, or full
repeats with the default (dense) strides. Other repeat/mask forms raise UnsupportedInstruction.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any

from opsim.asc import _core
from opsim.asc.enums import CMPMODE, ROUND_MODE_NAME, ReduceOrder, RoundMode, SELMODE
from opsim.asc.tensor import DeferredScalar, GlobalTensor, LocalTensor
from opsim.asc.types import (BrcbRepeatParams, CopyRepeatParams, DataCopyCO12DstParams, DataCopyExtParams,
                             DataCopyPadExtParams, DataCopyPadParams, DataCopyParams, Nd2NzParams)
from opsim.simulator import isa, isa_ext
from opsim.simulator.tile import GlobalSlice, GlobalTensor as SimGlobalTensor

# ---------------------------------------------------------------------------------------------
# data movement
# ---------------------------------------------------------------------------------------------


def _strided_gm(g: GlobalTensor, blocks: int, run: int, gap: int) -> GlobalSlice:
    """``blocks`` runs of ``run`` elements, ``gap`` elements apart, from a GM view."""
    a = g._addr
    t = SimGlobalTensor(a.device, g.address, a.dtype.sim, (blocks, run), (run + gap, 1), 0)
    return GlobalSlice(t, 0, blocks * run)


def data_copy(dst: Any, src: Any, *args: Any, **kwargs: Any) -> None:
    """``data_copy(dst, src, count)`` GM<->UB (MTE2/MTE3, whole 32 B blocks), UB->UB (vector
    Copy), GM->L1 with ``Nd2NzParams`` and L0C->GM with ``DataCopyCO12DstParams`` (cube); or
    ``data_copy(dst, src, repeat_params=DataCopyParams(...))`` with a strided GM side."""
    state = _core.current()
    params = kwargs.pop("repeat_params", None) or kwargs.pop("intri_params", None)
    count = kwargs.pop("count", None)
    if args:
        if isinstance(args[0], (DataCopyParams, Nd2NzParams, DataCopyCO12DstParams)):
            params = args[0]
        else:
            count = args[0]
    if len(args) > 1 or kwargs:
        raise _core.unsupported("data_copy with DataCopyEnhancedParams or slice lists")
    if isinstance(params, (Nd2NzParams, DataCopyCO12DstParams)):
        from opsim.asc import cube
        return cube.data_copy_cube(state, dst, src, params)
    if isinstance(dst, LocalTensor) and isinstance(src, LocalTensor):
        if params is not None:
            count = params.block_count * params.block_len * 32 // dst.sim.dtype.itemsize
            if params.block_count > 1 and (params.src_stride or params.dst_stride):
                raise _core.unsupported("a strided local->local data_copy")
        if dst.sim.region.name != src.sim.region.name or dst.sim.region.name not in ("UB",):
            from opsim.asc import cube
            return cube.local_copy(state, dst, src, int(count))
        state.emit(isa.Copy(dst.sim, src.sim, int(count)))
        return
    if params is not None:
        if not isinstance(params, DataCopyParams):
            raise TypeError(f"data_copy repeat_params must be DataCopyParams, got {type(params).__name__}")
        local = dst if isinstance(dst, LocalTensor) else src
        glob = src if isinstance(dst, LocalTensor) else dst
        if not isinstance(local, LocalTensor) or not isinstance(glob, GlobalTensor):
            raise TypeError("data_copy needs a LocalTensor and a GlobalTensor")
        item = local.sim.dtype.itemsize
        run = params.block_len * 32 // item
        gm_gap = (params.src_stride if isinstance(dst, LocalTensor) else params.dst_stride) * 32 // item
        local_gap = params.dst_stride if isinstance(dst, LocalTensor) else params.src_stride
        if local_gap and params.block_count > 1:
            raise _core.unsupported("data_copy with a strided local side (UB stride)")
        gs = (_strided_gm(glob, params.block_count, run, gm_gap) if gm_gap and params.block_count > 1
              else glob.sim_slice(params.block_count * run))
        n = params.block_count * run
        if isinstance(dst, LocalTensor):
            state.emit(isa.DataCopy(dst.sim, gs, n))
        else:
            state.emit(isa.DataCopy(gs, src.sim, n))
        return
    if count is None:
        raise TypeError("data_copy needs a count or repeat_params")
    n = int(count)
    if isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor):
        state.emit(isa.DataCopy(dst.sim, src.sim_slice(n), n))
    elif isinstance(dst, GlobalTensor) and isinstance(src, LocalTensor):
        state.emit(isa.DataCopy(dst.sim_slice(n), src.sim, n))
    else:
        raise TypeError(f"data_copy between {type(dst).__name__} and {type(src).__name__}")


def data_copy_pad(dst: Any, src: Any, data_copy_params: Any = None, pad_params: Any = None,
                  **kwargs: Any) -> None:
    """``DataCopyPad``: any byte length. GM->UB ``(dst, src, DataCopyExtParams,
    DataCopyPadExtParams)`` (right padding with a value is modelled), UB->GM ``(dst, src,
    DataCopyExtParams)``; one block (block_count 1) or several with GM gaps and no UB gap."""
    state = _core.current()
    p = data_copy_params if data_copy_params is not None else kwargs.pop("params", None)
    if not isinstance(p, (DataCopyExtParams, DataCopyParams)):
        raise TypeError(f"data_copy_pad takes DataCopyExtParams, got {type(p).__name__}")
    if isinstance(p, DataCopyParams):      # the older form: block_len in 32 B units... in bytes for Pad
        p = DataCopyExtParams(p.block_count, p.block_len, p.src_stride, p.dst_stride)
    local = dst if isinstance(dst, LocalTensor) else src
    glob = src if isinstance(dst, LocalTensor) else dst
    if not isinstance(local, LocalTensor) or not isinstance(glob, GlobalTensor):
        raise TypeError("data_copy_pad needs a LocalTensor and a GlobalTensor")
    item = local.sim.dtype.itemsize
    if p.block_len % item:
        raise _core.unsupported(f"data_copy_pad with block_len {p.block_len} B, not a whole number of "
                                f"{item} B elements")
    run = p.block_len // item
    blocks = int(p.block_count)
    to_local = isinstance(dst, LocalTensor)
    gm_gap_bytes = p.src_stride if to_local else p.dst_stride
    local_gap = p.dst_stride if to_local else p.src_stride
    if gm_gap_bytes % item:
        raise _core.unsupported(f"data_copy_pad with a GM gap of {gm_gap_bytes} B, not whole elements")
    n = blocks * run
    gs = (_strided_gm(glob, blocks, run, gm_gap_bytes // item) if blocks > 1 and gm_gap_bytes
          else glob.sim_slice(n))
    pad = pad_params
    padded = isinstance(pad, (DataCopyPadExtParams, DataCopyPadParams)) and pad.is_pad
    if blocks > 1 and (local_gap or (run * item) % 32):
        # UB rows start 32 B aligned: row length rounded up to 32 B plus the UB gap (32 B units)
        if padded:
            raise _core.unsupported("data_copy_pad with padding values over several blocks")
        pitch = (-(-(run * item) // 32) + int(local_gap)) * 32 // item
        if to_local:
            state.emit(isa_ext.DataCopyPad2D(dst.sim, gs, blocks, run, pitch))
        else:
            state.emit(isa_ext.DataCopyPad2D(gs, src.sim, blocks, run, pitch))
        return
    if not to_local:
        state.emit(isa.DataCopyPad(gs, src.sim, n))
        return
    if padded:
        if pad.left_padding or blocks > 1:
            raise _core.unsupported("data_copy_pad with left padding or padding of several blocks")
        state.emit(isa_ext.DataCopyPadValue(dst.sim, gs, n, pad.right_padding, float(pad.padding_value)))
        return
    state.emit(isa.DataCopyPad(dst.sim, gs, n))


# ---------------------------------------------------------------------------------------------
# vector instructions
# ---------------------------------------------------------------------------------------------

def _mask_count(mask: Any, per: int) -> int:
    if isinstance(mask, (list, tuple)):
        value = 0
        for word in mask:               # Ascend C order: {high, low}
            value = (value << 64) | (int(word) & ((1 << 64) - 1))
        if value & (value + 1):
            raise _core.unsupported("a bitwise mask that is not a continuous run from element 0")
        # builtins.min: this module's own ``min`` is the vector instruction
        return builtins.min(bin(value).count("1"), per)
    return int(mask)


def _count_of(name: str, dst: LocalTensor, args: tuple, kwargs: dict) -> int:
    """The element count of a vector call in the count or the (contiguous) repeat form."""
    if "count" in kwargs:
        return int(kwargs["count"])
    args = tuple(a for a in args if not isinstance(a, bool))     # a trailing is_set_mask
    if "mask" in kwargs:
        args = (kwargs["mask"], kwargs.get("repeat_times", kwargs.get("repeat_time", 1)),
                kwargs.get("repeat_params"))
    if len(args) == 1:
        return int(args[0])
    if len(args) < 2:
        raise TypeError(f"{name} needs a count, or mask, repeat_times and repeat_params")
    per = 256 // dst.sim.dtype.itemsize
    mask = _mask_count(args[0], per)
    repeat = int(args[1])
    params = args[2] if len(args) > 2 else None
    if not 1 <= mask <= per:
        raise _core.unsupported(f"{name} with mask {mask} (1..{per} elements per repeat for {dst.sim.dtype})")
    if repeat == 1 and _dense_blocks(params):
        return mask
    if mask == per and _dense(params):
        return per * repeat
    raise _core.unsupported(f"{name} in the repeat form with mask {mask}, {repeat} repeats and {params}",
                            "only contiguous forms (one repeat, or full masks with default strides) are modelled")


def _dense_blocks(p: Any) -> bool:
    if p is None:
        return True
    return all(getattr(p, f) == 1 for f in p.__dataclass_fields__ if f.endswith("blk_stride"))


def _dense(p: Any) -> bool:
    if p is None:
        return True
    return _dense_blocks(p) and all(getattr(p, f) == 8 for f in p.__dataclass_fields__ if f.endswith("rep_stride"))


def _precheck(state: _core.BlockState, op: str, dt: Any, arithmetic: bool = True) -> None:
    """Refuse at the call (naming the kernel line) what the device would refuse when the
    instruction executes: arithmetic in a dtype its vector unit lacks, an op with no cost entry."""
    spec = state.core.device.spec
    if arithmetic and dt.name not in spec.vector.compute_dtypes:
        if not dt.is_float:     # the unit has it; the model does not (isa.compute_refusal)
            raise _core.unsupported(f"{op} in {dt.name} on {spec.name}",
                                    f"integer vector arithmetic is not modelled; opsim computes in "
                                    f"{', '.join(spec.vector.compute_dtypes)}: cast first")
        raise _core.unsupported(f"{op} in {dt.name} on {spec.name}",
                                f"its vector unit computes in {', '.join(spec.vector.compute_dtypes)}; cast first")
    cost = spec.vector.cost.get(op)
    key = dt.name if arithmetic or op.startswith("Cast") else isa._cost_dtype(dt)
    if cost is None or key not in cost:
        raise _core.unsupported(f"{op} in {dt.name} on {spec.name} (no entry in its vector cost table)")


def _scalar(v: Any) -> Any:
    if isinstance(v, DeferredScalar):
        return v.tensor
    if isinstance(v, LocalTensor):
        raise TypeError("a scalar operand must be a number or t.get_value(i), got a LocalTensor")
    return float(v)


def _binary(cls: type[isa.VectorOp], name: str):
    def op(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, *args: Any, **kwargs: Any) -> None:
        state = _core.current()
        n = _count_of(name, dst, args, kwargs)
        _precheck(state, cls.name, dst.sim.dtype)
        state.emit(cls(dst.sim, src0.sim, src1.sim, count=n))
    op.__name__ = name
    op.__doc__ = f"``{cls.__name__}``: {cls.__doc__} (VECTOR pipe, cost table entry {cls.__name__})."
    return op


def _unary(cls: type[isa.VectorOp], name: str):
    def op(dst: LocalTensor, src: LocalTensor, *args: Any, **kwargs: Any) -> None:
        state = _core.current()
        n = _count_of(name, dst, args, kwargs)
        _precheck(state, cls.name, dst.sim.dtype)
        state.emit(cls(dst.sim, src.sim, count=n))
    op.__name__ = name
    op.__doc__ = f"``{cls.__name__}``: {cls.__doc__} (VECTOR pipe, cost table entry {cls.__name__})."
    return op


def _with_scalar(cls: type[isa.VectorOp], name: str):
    def op(dst: LocalTensor, src: LocalTensor, scalar: Any, *args: Any, **kwargs: Any) -> None:
        state = _core.current()
        n = _count_of(name, dst, args, kwargs)
        _precheck(state, cls.name, dst.sim.dtype)
        state.emit(cls(dst.sim, src.sim, scalar=_scalar(scalar), count=n))
    op.__name__ = name
    op.__doc__ = f"``{cls.__name__}``: {cls.__doc__} (VECTOR pipe, cost table entry {cls.__name__})."
    return op


add = _binary(isa.Add, "add")
sub = _binary(isa.Sub, "sub")
mul = _binary(isa.Mul, "mul")
div = _binary(isa.Div, "div")
max = _binary(isa.Max, "max")      # noqa: A001 - pyasc's name
min = _binary(isa.Min, "min")      # noqa: A001
adds = _with_scalar(isa.Adds, "adds")
muls = _with_scalar(isa.Muls, "muls")
maxs = _with_scalar(isa.Maxs, "maxs")
mins = _with_scalar(isa.Mins, "mins")
leaky_relu = _with_scalar(isa_ext.LeakyRelu, "leaky_relu")
exp = _unary(isa.Exp, "exp")
ln = _unary(isa.Ln, "ln")
abs = _unary(isa.Abs, "abs")       # noqa: A001
sqrt = _unary(isa.Sqrt, "sqrt")
rsqrt = _unary(isa_ext.Rsqrt, "rsqrt")
reciprocal = _unary(isa.Reciprocal, "reciprocal")
relu = _unary(isa_ext.Relu, "relu")


def axpy(dst: LocalTensor, src: LocalTensor, scalar: Any, *args: Any, **kwargs: Any) -> None:
    """``Axpy(dst, src, scalar, count)`` (or the contiguous repeat form with UnaryRepeatParams):
    dst[i] = src[i] * scalar + dst[i], the product rounded to dst's dtype before the add. src,
    scalar and dst are fp16 or fp32, or fp16 src and scalar into an fp32 dst (the mixed form:
    a repeat covers 64 elements, 256 B of dst). The scalar is a number or ``t.get_value(i)`` of
    src's dtype. VECTOR pipe, cost table entry Axpy."""
    state = _core.current()
    n = _count_of("axpy", dst, args, kwargs)
    pair = (src.sim.dtype.name, dst.sim.dtype.name)
    if pair not in isa_ext.AXPY_DTYPES:
        raise _core.unsupported(f"axpy with src {pair[0]} and dst {pair[1]}",
                                "axpy computes in src/dst "
                                + ", ".join(f"{a}/{b}" for a, b in isa_ext.AXPY_DTYPES) + ": cast first")
    _precheck(state, "Axpy", src.sim.dtype)
    _precheck(state, "Axpy", dst.sim.dtype)
    if isinstance(scalar, DeferredScalar) and scalar.tensor.dtype != src.sim.dtype:
        raise TypeError(f"axpy with a get_value() scalar of {scalar.tensor.dtype} and src of {src.sim.dtype} "
                        f"(at {_core.call_site()}); the scalar has src's type: cast first")
    state.emit(isa_ext.Axpy(dst.sim, src.sim, _scalar(scalar), n))


def transpose(dst: LocalTensor, src: LocalTensor, *args: Any, **kwargs: Any) -> None:
    """``Transpose(dst, src)``: the 16 x 16 matrix of 16-bit elements (float16 or int16) at src,
    transposed into dst; dst may be src. The enhanced form (``shared_tmp_buffer``,
    ``TransposeParamsExt``) is not modelled. VECTOR pipe, cost table entry Transpose."""
    state = _core.current()
    if args or kwargs:
        raise _core.unsupported("transpose with a shared_tmp_buffer and TransposeParamsExt (the enhanced form)",
                                "only transpose(dst, src), one 16 x 16 block of 16-bit elements, is modelled")
    for name, t in (("dst", dst), ("src", src)):
        if t.sim.dtype.name not in isa_ext.TRANSPOSE_DTYPES:
            raise _core.unsupported(f"transpose with {name} of {t.sim.dtype}",
                                    "it moves 16-bit elements: float16 or int16 (uint16 is not an opsim dtype)")
    if dst.sim.dtype != src.sim.dtype:
        raise TypeError(f"transpose of {src.sim.dtype} into {dst.sim.dtype} (at {_core.call_site()}); "
                        f"dst and src have one dtype")
    spec = state.core.device.spec
    if "fp16" not in spec.vector.cost.get("Transpose", {}):
        raise _core.unsupported(f"transpose on {spec.name} (no Transpose entry in its vector cost table)")
    state.emit(isa_ext.Transpose(dst.sim, src.sim))


_BRCB_DTYPES = "float16, bfloat16, float32, int16 or int32 (uint16 and uint32 are not opsim dtypes)"


def brcb(dst: LocalTensor, src0: LocalTensor, repeat_times: int, repeat_params: BrcbRepeatParams) -> None:
    """``Brcb(dst, src0, repeatTime, BrcbRepeatParams)``: each repeat takes 8 consecutive
    elements of src0 and fills one 32 B block of dst with each, the blocks one after another
    (``repeat_times`` x 8 elements in, ``repeat_times`` x 256 B out). Only the default strides
    are modelled: ``dst_blk_stride`` 1 (0 counts as 1) and ``dst_rep_stride`` 8. 16- and 32-bit
    dtypes; src0 and dst may not overlap. VECTOR pipe, cost table entry Brcb."""
    state = _core.current()
    p = repeat_params
    if not isinstance(p, BrcbRepeatParams):
        raise TypeError(f"brcb takes BrcbRepeatParams, got {type(p).__name__} (at {_core.call_site()})")
    try:
        repeat = operator.index(repeat_times) if not isinstance(repeat_times, bool) else -1
    except TypeError:
        repeat = -1
    if not 0 <= repeat <= 255:
        raise ValueError(f"brcb repeat_times {repeat_times!r} (at {_core.call_site()}): an int in 0..255 "
                         f"(the instruction's uint8 repeat count)")
    if int(p.dst_blk_stride) not in (0, 1):
        raise _core.unsupported(f"brcb with dst_blk_stride {p.dst_blk_stride}",
                                "only dst_blk_stride 1 (or 0, which counts as 1) is modelled: the 8 blocks of "
                                "a repeat one after another")
    if int(p.dst_rep_stride) != 8:
        raise _core.unsupported(f"brcb with dst_rep_stride {p.dst_rep_stride}",
                                "only dst_rep_stride 8 is modelled: each repeat's 8 blocks (256 B) right after "
                                "the last")
    for name, t in (("dst", dst), ("src0", src0)):
        if t.sim.dtype.name not in isa_ext.BRCB_DTYPES:
            raise _core.unsupported(f"brcb with {name} of {t.sim.dtype}", f"it moves {_BRCB_DTYPES}")
    if dst.sim.dtype != src0.sim.dtype:
        raise TypeError(f"brcb of {src0.sim.dtype} into {dst.sim.dtype} (at {_core.call_site()}); "
                        f"dst and src0 have one dtype")
    n_dst = repeat * 256 // dst.sim.dtype.itemsize
    if isa_ext.overlaps(dst.sim, n_dst, src0.sim, repeat * 8):
        raise ValueError(f"brcb with src0 and dst overlapping (at {_core.call_site()}): {src0.sim!r} and "
                         f"{dst.sim!r}; the instruction's src0 and dst must not share memory")
    spec = state.core.device.spec
    if isa_ext.brcb_cost_dtype(dst.sim.dtype) not in spec.vector.cost.get("Brcb", {}):
        raise _core.unsupported(f"brcb on {spec.name} (no Brcb entry in its vector cost table)",
                                "opsim models Brcb on the Atlas A2/A3 parts, whose cost table prices it")
    state.emit(isa_ext.Brcb(dst.sim, src0.sim, repeat))


def duplicate(dst: LocalTensor, scalar: Any, *args: Any, **kwargs: Any) -> None:
    """``Duplicate``: dst[:count] = scalar, a number or ``t.get_value(i)`` (read on the device
    when the instruction executes: a broadcast of an element of local memory)."""
    state = _core.current()
    n = _count_of("duplicate", dst, args, kwargs)
    if isinstance(scalar, DeferredScalar) and scalar.tensor.dtype != dst.sim.dtype:
        raise TypeError(f"duplicate of a get_value() scalar of {scalar.tensor.dtype} into a {dst.sim.dtype} "
                        f"tensor (at {_core.call_site()}); the scalar has the tensor's type: cast first")
    state.emit(isa.Duplicate(dst.sim, _scalar(scalar), n))


def copy(dst: LocalTensor, src: LocalTensor, mask: Any, repeat_time: int, repeat_params: CopyRepeatParams,
         *args: Any) -> None:
    """``Copy(dst, src, mask, repeatTime, CopyRepeatParams)``: a UB -> UB vector copy, in the
    forms that cover contiguous elements: one repeat with a continuous mask, or full repeats
    with block strides 1 and repeat sizes 8 (one 256 B repeat after another)."""
    state = _core.current()
    per = 256 // dst.sim.dtype.itemsize
    m, repeat, p = _mask_count(mask, per), int(repeat_time), repeat_params
    if not isinstance(p, CopyRepeatParams):
        raise TypeError(f"copy takes CopyRepeatParams, got {type(p).__name__} (at {_core.call_site()})")
    if not 1 <= m <= per:
        raise _core.unsupported(f"copy with mask {m} (1..{per} elements per repeat for {dst.sim.dtype})")
    blocks_dense = p.dst_stride == 1 and p.src_stride == 1
    if repeat == 1 and blocks_dense:
        n = m
    elif m == per and blocks_dense and p.dst_repeat_size == 8 and p.src_repeat_size == 8:
        n = per * repeat
    else:
        raise _core.unsupported(f"copy in the repeat form with mask {m}, {repeat} repeats and {p}",
                                "only contiguous forms (block strides 1; one repeat, or full masks with repeat "
                                "sizes 8) are modelled")
    state.emit(isa.Copy(dst.sim, src.sim, n))


def cast(dst: LocalTensor, src: LocalTensor, round_mode: RoundMode, *args: Any, **kwargs: Any) -> None:
    """``Cast(dst, src, round_mode, count)``: dtype conversion with an Ascend round mode. As in
    pyasc the round mode is required and comes before the count (or the repeat form's mask)."""
    state = _core.current()
    if isinstance(round_mode, bool) or not isinstance(round_mode, int) or round_mode not in set(RoundMode):
        # a port that left the round mode out passes its count here
        raise TypeError(f"cast(dst, src, round_mode, count): round_mode must be an asc.RoundMode "
                        f"({', '.join(m.name for m in RoundMode)}), got {round_mode!r} (at "
                        f"{_core.call_site()}); pyasc's cast takes the round mode before the count")
    n = _count_of("cast", dst, args, kwargs)
    if src.sim.dtype != dst.sim.dtype:
        _check_cast(state, src.sim.dtype, dst.sim.dtype)
    state.emit(isa.Cast(dst.sim, src.sim, ROUND_MODE_NAME[RoundMode(round_mode)], n))


def _check_cast(state: _core.BlockState, src: Any, dst: Any) -> None:
    """Refuse at the call a conversion the device's vector unit has no Cast entry for: say so
    plainly when it has no conversion from the source (or to the destination) dtype at all, else
    list those it has from the source dtype and the two-cast chains that reach the destination."""
    spec = state.core.device.spec
    entry = spec.vector.cost.get(f"Cast_{src.name}_{dst.name}")
    if entry is not None and src.name in entry:
        return
    # every conversion the cost table prices, as (from, to) pairs of dtype names
    pairs = sorted(tuple(k[len("Cast_"):].split("_", 1)) for k, v in spec.vector.cost.items()
                   if k.startswith("Cast_") and k.count("_") == 2 and k.split("_")[1] in v)
    froms = [b for a, b in pairs if a == src.name]
    tos = [a for a, b in pairs if b == dst.name]
    missing = f"no Cast_{src.name}_{dst.name} entry in its cost table"
    if not froms or not tos:
        # no chain of casts can help: the device converts nothing from the source (or to the
        # destination) dtype
        sides = ([(f"from {src.name}", f"Cast_{src.name}_*")] if not froms else []) \
            + ([(f"to {dst.name}", f"Cast_*_{dst.name}")] if not tos else [])
        hint = (f"{spec.name} has no conversion {' and none '.join(s for s, _ in sides)} at all ({missing}, "
                f"nor any {' or '.join(k for _, k in sides)} entry); keep the data in a dtype the device "
                "converts, or run on a device that has the conversion")
    else:
        via = [m for m in froms if m in tos]
        hint = (f"its vector unit has no such conversion ({missing}); from {src.name} it converts "
                + ", ".join(f"{src.name} -> {m}" for m in froms) + ": "
                + (f"chain two casts, {' or '.join(f'{src.name} -> {m} -> {dst.name}' for m in via)}" if via
                   else f"no two casts reach {dst.name} (it converts to {dst.name} from "
                        + ", ".join(tos) + ")"))
    raise _core.unsupported(f"cast {src.name} -> {dst.name} on {spec.name}", hint)


def compare(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, cmp_mode: CMPMODE, *args: Any,
            **kwargs: Any) -> None:
    """``Compare(dst, src0, src1, cmpMode, count)``: a bit mask (uint8, LSB first) of src0 <op> src1."""
    state = _core.current()
    n = _count_of("compare", src0, args, kwargs)
    _precheck(state, "Compare", src0.sim.dtype)
    state.emit(isa_ext.Compare(dst.sim, src0.sim, src1.sim, CMPMODE(cmp_mode).name, n))


def compare_scalar(dst: LocalTensor, src0: LocalTensor, scalar: Any, cmp_mode: CMPMODE, *args: Any,
                   **kwargs: Any) -> None:
    """``CompareScalar(dst, src0, scalar, cmpMode, count)``."""
    state = _core.current()
    n = _count_of("compare_scalar", src0, args, kwargs)
    _precheck(state, "CompareScalar", src0.sim.dtype)
    state.emit(isa_ext.Compare(dst.sim, src0.sim, None, CMPMODE(cmp_mode).name, n, scalar=_scalar(scalar)))


def select(dst: LocalTensor, sel_mask: LocalTensor, src0: LocalTensor, src1: Any,
           sel_mode: SELMODE = SELMODE.VSEL_TENSOR_TENSOR_MODE, *args: Any, **kwargs: Any) -> None:
    """``Select(dst, selMask, src0, src1|scalar, selMode, count)``: dst = mask ? src0 : src1."""
    state = _core.current()
    n = _count_of("select", dst, args, kwargs)
    _precheck(state, "Select", dst.sim.dtype)
    mode = SELMODE(sel_mode)
    if mode == SELMODE.VSEL_TENSOR_SCALAR_MODE:
        state.emit(isa_ext.Select(dst.sim, sel_mask.sim, src0.sim, None, n, scalar=_scalar(src1)))
    elif mode == SELMODE.VSEL_TENSOR_TENSOR_MODE:
        state.emit(isa_ext.Select(dst.sim, sel_mask.sim, src0.sim, src1.sim, n))
    else:
        raise _core.unsupported(f"select in {mode.name}")


def _reduce(cls: type[isa_ext.ReduceOp], name: str):
    def op(dst: LocalTensor, src: LocalTensor, shared_tmp_buffer: LocalTensor, *args: Any, **kwargs: Any) -> None:
        state = _core.current()
        if kwargs.pop("cal_index", False) or (len(args) in (2, 4) and args[-1] is True):
            raise _core.unsupported(f"{name} with cal_index=True")
        args = tuple(a for a in args if a is not False)
        if len(args) == 3 or "src_rep_stride" in kwargs:
            n = _reduce_repeat_count(name, src, args, kwargs)
        else:
            n = _count_of(name, src, args, kwargs)
        _precheck(state, cls.name, src.sim.dtype)
        state.emit(cls(dst.sim, src.sim, shared_tmp_buffer.sim if shared_tmp_buffer is not None else None, n))
    op.__name__ = name
    op.__doc__ = f"``{cls.__name__}(dst, src, sharedTmpBuffer, count)``: dst[0] = reduction of src[:count]."
    return op


def _reduce_repeat_count(name: str, src: LocalTensor, args: tuple, kwargs: dict) -> int:
    """The element count of pyasc's repeat form ``reduce_*(dst, src, tmp, mask, repeat_time,
    src_rep_stride)`` (a stride in 32 B blocks between repeats, not a repeat-params struct),
    where it covers contiguous elements: one repeat, or full masks 8 blocks apart."""
    if kwargs:
        args = (kwargs.get("mask"), kwargs.get("repeat_time", 1), kwargs.get("src_rep_stride", 8))
    per = 256 // src.sim.dtype.itemsize
    mask, repeat, stride = _mask_count(args[0], per), int(args[1]), int(args[2])
    if not 1 <= mask <= per:
        raise _core.unsupported(f"{name} with mask {mask} (1..{per} elements per repeat for {src.sim.dtype})")
    if repeat == 1:
        return mask
    if mask == per and stride == 8:
        return per * repeat
    raise _core.unsupported(f"{name} in the repeat form with mask {mask}, {repeat} repeats and src_rep_stride "
                            f"{stride}", "only contiguous forms (one repeat, or full masks with stride 8) are modelled")


reduce_sum = _reduce(isa_ext.ReduceSum, "reduce_sum")
reduce_max = _reduce(isa_ext.ReduceMax, "reduce_max")
reduce_min = _reduce(isa_ext.ReduceMin, "reduce_min")


def _whole(cls: type[isa_ext.WholeReduce], name: str, indexed: bool):
    def op(dst: LocalTensor, src: LocalTensor, mask: Any, repeat_time: int, dst_rep_stride: int,
           src_blk_stride: int, src_rep_stride: int, order: ReduceOrder = ReduceOrder.ORDER_VALUE_INDEX,
           is_set_mask: bool = True) -> None:
        state = _core.current()
        if int(src_blk_stride) != 1:
            raise _core.unsupported(f"{name} with src_blk_stride {src_blk_stride}")
        per = 256 // src.sim.dtype.itemsize
        _precheck(state, cls.name, src.sim.dtype)
        with_index = False
        if indexed:
            order = ReduceOrder(order)
            if order == ReduceOrder.ORDER_VALUE_INDEX:
                with_index = True
            elif order != ReduceOrder.ORDER_ONLY_VALUE:
                raise _core.unsupported(f"{name} with {order.name}")
        state.emit(cls(dst.sim, src.sim, _mask_count(mask, per), int(repeat_time), int(dst_rep_stride),
                       int(src_rep_stride), with_index))
    op.__name__ = name
    op.__doc__ = f"``{cls.__name__}``: {cls.__doc__}"
    return op


whole_reduce_sum = _whole(isa_ext.WholeReduceSum, "whole_reduce_sum", False)
whole_reduce_max = _whole(isa_ext.WholeReduceMax, "whole_reduce_max", True)
whole_reduce_min = _whole(isa_ext.WholeReduceMin, "whole_reduce_min", True)
