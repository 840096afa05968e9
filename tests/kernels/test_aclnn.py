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
