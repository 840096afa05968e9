"""Parameter structures of the pyasc API (names and defaults of ``asc.language.core.types``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataCopyParams:
    """Strided DataCopy: ``block_count`` blocks of ``block_len`` 32 B units; the gaps between
    blocks are ``src_stride`` / ``dst_stride`` 32 B units."""
    block_count: int = 1
    block_len: int = 0
    src_stride: int = 0
    dst_stride: int = 0


@dataclass(frozen=True)
class DataCopyExtParams:
    """DataCopyPad: ``block_count`` blocks of ``block_len`` bytes; GM gaps in bytes, UB gaps in
    32 B blocks."""
    block_count: int = 1
    block_len: int = 0
    src_stride: int = 0
    dst_stride: int = 0
    rsv: int = 0


@dataclass(frozen=True)
class DataCopyPadExtParams:
    dtype: Any = None
    is_pad: bool = False
    left_padding: int = 0
    right_padding: int = 0
    padding_value: Any = 0


@dataclass(frozen=True)
class DataCopyPadParams:
    is_pad: bool = False
    left_padding: int = 0
    right_padding: int = 0
    padding_value: Any = 0


@dataclass(frozen=True)
class BinaryRepeatParams:
    dst_blk_stride: int = 1
    src0_blk_stride: int = 1
    src1_blk_stride: int = 1
    dst_rep_stride: int = 8
    src0_rep_stride: int = 8
    src1_rep_stride: int = 8


@dataclass(frozen=True)
class UnaryRepeatParams:
    dst_blk_stride: int = 1
    src_blk_stride: int = 1
    dst_rep_stride: int = 8
    src_rep_stride: int = 8


@dataclass(frozen=True)
class BrcbRepeatParams:
    """``Brcb``'s repeat parameters (pyasc's defaults), in 32 B blocks of dst: the stride
    between the 8 blocks of a repeat (0 counts as 1) and between repeats."""
    dst_blk_stride: int = 1
    dst_rep_stride: int = 8


@dataclass(frozen=True)
class CopyRepeatParams:
    """``Copy``'s repeat parameters (pyasc's defaults, all 0): block strides and repeat sizes in
    32 B blocks."""
    dst_stride: int = 0
    src_stride: int = 0
    dst_repeat_size: int = 0
    src_repeat_size: int = 0


@dataclass(frozen=True)
class Nd2NzParams:
    nd_num: int = 1
    n_value: int = 0
    d_value: int = 0
    src_nd_matrix_stride: int = 0
    src_d_value: int = 0
    dst_nz_c0_stride: int = 0
    dst_nz_n_stride: int = 1
    dst_nz_matrix_stride: int = 0


@dataclass(frozen=True)
class LoadData2DParams:
    start_index: int = 0
    repeat_times: int = 1
    src_stride: int = 0
    sid: int = 0
    dst_gap: int = 0
    if_transpose: bool = False
    addr_mode: int = 0


@dataclass(frozen=True)
class MmadParams:
    m: int = 0
    n: int = 0
    k: int = 0
    unit_flag: int = 0
    fm_offset: int = 0
    filter_offset: int = 0
    cmatrix_init_val: bool = True    # Ascend C MmadParams.cmatrixInitVal: True overwrites L0C
    cmatrix_source: bool = False
    is_bias: bool = False


@dataclass(frozen=True)
class FixpipeParamsV220:
    n_size: int = 0
    m_size: int = 0
    src_stride: int = 0
    dst_stride: int = 0
    quant_pre: Any = 0
    deq_scalar: int = 0
    nd_num: int = 1
    src_nd_stride: int = 0
    dst_nd_stride: int = 0
    relu_en: bool = False
    unit_flag: int = 0
    is_channel_split: bool = False


@dataclass(frozen=True)
class DataCopyCO12DstParams:
    n_size: int = 0
    m_size: int = 0
    dst_stride: int = 0
    src_stride: int = 0
    quant_pre: Any = 0
    relu_pre: int = 0
    channel_split: bool = False
    nz2nd_en: bool = False
