"""The pyasc API names that opsim.asc does not model, and the error their use raises.

A kernel ported from pyasc that calls one of them (``asc.gather(...)``, ``asc.adv.quant(...)``)
gets an :class:`UnsupportedAPI` naming the call, its kernel line and, where there is one, the
modelled way to write it -- not Python's bare ``AttributeError: module 'opsim.asc' has no
attribute 'gather'``. The names are those pyasc exports from ``asc.language`` and
``asc.language.adv`` (docs/sources.md#pyasc-api); docs/writing-kernels.md §6 lists them.
"""
from __future__ import annotations

from opsim.simulator.errors import UnsupportedInstruction


class UnsupportedAPI(UnsupportedInstruction, AttributeError):
    """A pyasc API name opsim.asc does not model (an AttributeError too, so ``hasattr`` and
    ``getattr(asc, name, default)`` keep working)."""


_DTYPES = "opsim's dtypes are float16, float32, bfloat16, float64, int8, int16, int32, int64, uint8, bool_"
_MASK = "vector calls take the count form, or the repeat form with a continuous mask"

# name -> how to write it with what is modelled ("" when there is no such way)
BASIC: dict[str, str] = {
    **{n: "" for n in (
        "AippChannelPaddingParams", "AippColorSpaceConvParams", "AippDataTypeConvParams", "AippInputFormat",
        "AippPaddingParams", "AippParams", "AippSingleLineParams", "AippSwapParams", "BatchMode", "BlockMode",
        "CacheLine", "CacheMode", "CacheRwMode", "DataFormat", "DcciDst", "DeqScale", "GatherMaskMode",
        "GatherMaskParams", "GatherRepeatParams", "IterateMode", "IterateOrder", "LayoutMode", "MatmulConfigMode",
        "MemDsbT", "Nz2NdParamsFull", "QuantModes", "ScheduleType", "SliceInfo", "TBufPool",
        "TransDataTo5HDParams", "TransposeParamsExt", "TransposeType", "add_deq_relu", "bilinear_interpolation",
        "bitwise_and", "bitwise_not", "bitwise_or", "cast_deq", "data_cache_clean_and_invalid",
        "dump_acc_chk_point", "gather", "gather_mask", "gatherb", "get_arch_version",
        "get_gather_mask_remain_count", "get_hccl_context", "get_icache_preload_status", "get_program_counter",
        "get_system_cycle", "get_tpipe_ptr", "icache_preload", "inline", "number", "pad_t", "print_time_stamp",
        "proposal_concat", "proposal_extract", "scalar_cast", "scalar_get_sff_value", "scatter",
        "set_aipp_functions", "set_deq_scale", "set_hccl_context", "set_hf32_mode", "set_hf32_trans_mode",
        "set_mm_layout_transform", "shift_left", "shift_right", "static_assert", "trans_data_to_5hd",
        "trap", "void", "array", "ShapeInfo")},
    "fused_mul_add": "write it as mul then add",
    "fused_mul_add_relu": "write it as mul, add, relu",
    "mul_add_dst": "write it as mul into a scratch tensor, then add",
    "add_relu": "write it as add then relu",
    "sub_relu": "write it as sub then relu",
    "add_relu_cast": "write it as add, relu, cast",
    "sub_relu_cast": "write it as sub, relu, cast",
    "mul_cast": "write it as mul then cast",
    "block_reduce_sum": "reduce with whole_reduce_sum (one sum per repeat) or reduce_sum",
    "block_reduce_max": "reduce with whole_reduce_max or reduce_max",
    "block_reduce_min": "reduce with whole_reduce_min or reduce_min",
    "pair_reduce_sum": "reduce with whole_reduce_sum or reduce_sum",
    "repeat_reduce_sum": "reduce with whole_reduce_sum or reduce_sum",
    "set_mask_count": _MASK,
    "set_mask_norm": _MASK,
    "reset_mask": _MASK,
    "set_vector_mask": _MASK,
    "get_data_block_size_in_bytes": "a data block is 32 B (asc.property(asc.ONE_BLK_SIZE))",
    "DataCopyEnhancedParams": "data_copy takes a count or DataCopyParams",
    "uint16": _DTYPES, "uint32": _DTYPES, "uint64": _DTYPES,
}

ADV: dict[str, str] = {
    **{n: "" for n in (
        "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "concat", "cos", "cosh", "digamma", "erf",
        "erfc", "extract", "floor", "frac", "lgamma", "power", "round", "sign", "sin", "sinh", "tan", "tanh",
        "trunc", "xor", "get_basic_config", "get_ib_share_norm_config", "get_matmul_api_tiling",
        "get_mdl_config", "get_mm_config", "get_normal_config", "get_special_basic_config",
        "get_special_mdl_config", "layer_norm", "sort", "SoftmaxTiling")},
    "exp": "use the basic asc.exp", "log": "use the basic asc.ln",
    "axpy": "use the basic asc.axpy(dst, src, scalar, count), modelled as muls then add",
    "softmax": "write it with reduce_max, adds, exp, reduce_sum and muls (examples/kernels/softmax.py)",
    "quant": "write it as muls, adds and a cast (the device's vector cost table decides which casts exist)",
    "dequant": "write it as a cast then muls",
}


def refuse(module: str, name: str, table: dict[str, str]) -> UnsupportedAPI:
    """The error for ``module.name`` (a pyasc API opsim does not model), naming the kernel line."""
    from opsim.asc._core import call_site
    hint = table[name]
    return UnsupportedAPI(f"{module}.{name} (a pyasc API) is not supported by opsim.asc (used at {call_site()})"
                          + (f"; {hint}" if hint else "")
                          + "; docs/writing-kernels.md §6 lists what is modelled")
