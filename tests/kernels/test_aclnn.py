"""The aclnn two-phase entry points (kernels/aclnn.py): failures a caller can read back."""
from __future__ import annotations

import numpy as np

from opsim.kernels import aclnn
from opsim.simulator import acl
from opsim.simulator.acl import AclRuntime


def _rt_with_stream():
    rt = AclRuntime("atlas-a2", trace_level="off")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    stream, ret = rt.aclrtCreateStream()
    assert ret == 0
    return rt, stream


def test_phase_two_without_an_executor_explains_itself_in_the_streams_runtime():
    rt, stream = _rt_with_stream()
    rt.fail(acl.ACL_ERROR_INVALID_PARAM, "an older, unrelated failure")
    assert aclnn.aclnnMseLossBackward(0, 0, None, stream) == 161001
    msg = rt.aclGetRecentErrMsg()
    assert "aclnnMseLossBackward" in msg and "executor is null" in msg and "GetWorkspaceSize" in msg
    assert aclnn.aclnnBinaryCrossEntropyBackward(0, 0, np.zeros(3), stream) == 161002
    msg = rt.aclGetRecentErrMsg()
    assert "aclnnBinaryCrossEntropyBackward" in msg and "ndarray" in msg and "aclOpExecutor" in msg
    # no runtime to keep the message (no stream either): still a status, never a traceback
    assert aclnn.aclnnMseLossBackward(0, 0, None, None) == 161001
    assert aclnn.aclnnMseLossBackward(0, 0, "x", "y") == 161002


def _tensor(rt, shape=(2, 2), dtype=acl.ACL_FLOAT):
    ptr, ret = rt.aclrtMalloc(64)
    assert ret == 0
    t = rt.aclCreateTensor(list(shape), dtype, None, 0, acl.ACL_FORMAT_ND, list(shape), ptr)
    assert t is not None
    return ptr, t


def test_a_bad_handle_is_named_by_its_documented_c_parameter_in_both_phases():
    """The seeds' parameter names (gradOutput, weightOptional, targetMask, logitsMaxOptional,
    inputGradOut, ...), not opsim's operand keys (grad_output, weight, target_mask, ...)."""
    rt, stream = _rt_with_stream()
    (_, g), (_, x), (_, y), (_, o) = (_tensor(rt) for _ in range(4))
    # GetWorkspaceSize: a destroyed gradOutput, a weightOptional that is not a tensor
    _, dead = _tensor(rt)
    assert rt.aclDestroyTensor(dead) == 0
    _, ex, st = aclnn.aclnnMseLossBackwardGetWorkspaceSize(dead, x, y, 0, o)
    assert (st, ex) == (161002, None)
    assert "gradOutput was destroyed" in rt.aclGetRecentErrMsg()
    _, _, st = aclnn.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(g, x, y, "w", 0, o)
    assert st == 161002 and "weightOptional is a str" in rt.aclGetRecentErrMsg()
    _, _, st = aclnn.aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
        g, x, x, "mask", x, 0.0, dead, y, None, o, o)
    msg = rt.aclGetRecentErrMsg()
    assert st == 161002 and "targetMask is a str" in msg and "target_mask" not in msg
    _, _, st = aclnn.aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
        g, x, x, x, x, 0.0, dead, y, None, o, o)
    assert st == 161002 and "logitsMaxOptional was destroyed" in rt.aclGetRecentErrMsg()
    # the run phase: gradOutput's memory freed after GetWorkspaceSize
    gptr, g2 = _tensor(rt)
    ws, ex, st = aclnn.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(g2, x, y, None, 0, o)
    assert st == 0 and ex is not None
    assert rt.aclrtFree(gptr) == 0
    assert aclnn.aclnnBinaryCrossEntropyBackward(0, ws, ex, stream) == 161002
    msg = rt.aclGetRecentErrMsg()
    assert "gradOutput's tensorData" in msg and "grad_output" not in msg
