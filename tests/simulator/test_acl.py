"""The ACL host API: status codes, never an exception, copies and tensors."""
from __future__ import annotations

import numpy as np

from opsim.simulator import acl
from opsim.simulator.acl import AclRuntime


def _rt(device="atlas-a2"):
    rt = AclRuntime(device)
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    return rt


def test_calls_before_init_or_device_return_codes():
    rt = AclRuntime()
    assert rt.aclrtSetDevice(0) == acl.ACL_ERROR_UNINITIALIZE
    assert rt.aclInit() == 0 and rt.aclInit() == acl.ACL_ERROR_REPEAT_INITIALIZE
    ptr, ret = rt.aclrtMalloc(64)
    assert ret == acl.ACL_ERROR_RT_INVALID_DEVICEID and "aclrtSetDevice" in rt.aclGetRecentErrMsg()
    assert rt.aclrtSetDevice(1) == acl.ACL_ERROR_RT_INVALID_DEVICEID and "id 1" in rt.aclGetRecentErrMsg()


def test_unknown_device_is_a_status_not_a_traceback():
    rt = AclRuntime("atlas-a9")
    rt.aclInit()
    assert rt.aclrtSetDevice(0) == acl.ACL_ERROR_INVALID_PARAM
    assert "atlas-a9" in rt.aclGetRecentErrMsg()


def test_memcpy_round_trip_and_bad_sizes():
    rt = _rt()
    host = np.arange(16, dtype=np.float32)
    ptr, ret = rt.aclrtMalloc(host.nbytes)
    assert ret == 0 and ptr % 32 == 0
    assert rt.aclrtMemcpy(ptr, 64, host, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    back = np.zeros(16, np.float32)
    assert rt.aclrtMemcpy(back, 64, ptr, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert np.array_equal(back, host)
    assert rt.aclrtMemcpy(ptr, 32, host, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_ERROR_INVALID_PARAM
    assert rt.aclrtMemcpy(ptr + 64, 64, host, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_ERROR_INVALID_PARAM
    assert "0x" in rt.aclGetRecentErrMsg()
    assert rt.aclrtMemcpy(ptr, 64, host, 64, 7) == acl.ACL_ERROR_INVALID_PARAM
    assert rt.aclrtMalloc(0)[1] == acl.ACL_ERROR_INVALID_PARAM
    assert rt.aclrtFree(ptr) == 0 and rt.aclrtFree(ptr) == acl.ACL_ERROR_INVALID_PARAM


def test_device_memory_exhaustion_is_bad_alloc():
    rt = _rt("atlas-a2-910b4")
    ptr, ret = rt.aclrtMalloc(40 << 30)  # 40 GiB on a 32 GiB part
    assert ret == acl.ACL_ERROR_BAD_ALLOC and ptr == 0
    msg = rt.aclGetRecentErrMsg()
    assert "42949672960" in msg and "34359738368" in msg and "HBM" in msg


def test_create_tensor_checks_alignment_dtype_and_storage():
    rt = _rt()
    ptr, _ = rt.aclrtMalloc(256)
    assert rt.aclCreateTensor([4, 4], acl.ACL_FLOAT, [4, 1], 0, 2, [4, 4], ptr) is not None
    assert rt.aclCreateTensor([4, 4], acl.ACL_FLOAT, [4, 1], 0, 2, [4, 4], ptr + 4) is None
    assert "32 B aligned" in rt.aclGetRecentErrMsg()
    assert rt.aclCreateTensor([4, 4], 99, None, 0, 2, [4, 4], ptr) is None
    assert rt.aclCreateTensor([4, 4], acl.ACL_FLOAT, [4, 1], 1, 2, [4, 4], ptr) is None
    assert "beyond storage" in rt.aclGetRecentErrMsg()
    t = rt.aclCreateTensor([4, 4], acl.ACL_BF16, None, 0, 2, None, ptr)
    assert t.dtype.name == "bf16" and t.strides == (4, 1)


def test_deterministic_option_is_recorded():
    rt = _rt()
    assert rt.aclrtCtxSetSysParamOpt(acl.ACL_OPT_DETERMINISTIC, 1) == 0 and rt.deterministic
    assert rt.aclrtCtxSetSysParamOpt(5, 1) == acl.ACL_ERROR_INVALID_PARAM


def test_garbage_arguments_return_codes_instead_of_raising():
    from opsim.kernels import aclnn
    rt = _rt()
    assert rt.aclrtMemcpy("x", 4, "y", 4, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_ERROR_INVALID_PARAM
    assert "aclrtMemcpy" in rt.aclGetRecentErrMsg()
    assert rt.aclrtFree("z") == acl.ACL_ERROR_INVALID_PARAM
    assert rt.aclrtMalloc("big") == (0, acl.ACL_ERROR_INVALID_PARAM)
    assert rt.aclCreateTensor("a", "b", None, 0, 2, None, 0) is None
    assert rt.aclrtSynchronizeStream(None) == acl.ACL_ERROR_INVALID_PARAM
    assert aclnn.aclnnMseLossBackward(0, 0, "not an executor", None) == 161002
    assert aclnn.aclnnMseLossBackwardGetWorkspaceSize("a", "b", "c", 1, "d")[-1] == 161001


def test_host_copies_take_latency_plus_bytes_over_the_host_link_and_advance_simulated_time():
    rt = _rt()
    spec = rt.spec
    link = spec.host
    n = 64 << 20                                        # 64 MiB: the link rate dominates
    ptr, ret = rt.aclrtMalloc(n)
    assert ret == acl.ACL_SUCCESS
    host = np.zeros(n, np.uint8)
    t0 = rt.elapsed_cycles
    assert rt.aclrtMemcpy(ptr, n, host, n, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_SUCCESS
    assert rt.aclrtMemcpy(host, n, ptr, n, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_SUCCESS
    expect = round(link.latency_us * 1e-6 * spec.clock_hz) + -(-n * spec.clock_hz // int(link.bandwidth))
    assert [(k, b, e - s) for k, b, s, e in rt.host_copies] == [("H2D", n, expect), ("D2H", n, expect)]
    assert rt.elapsed_cycles - t0 == rt.host_copy_cycles == 2 * expect
    # a device-to-device copy does not cross the host link
    ptr2, _ = rt.aclrtMalloc(4096)
    assert rt.aclrtMemcpy(ptr2, 4096, ptr, 4096, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == acl.ACL_SUCCESS
    assert len(rt.host_copies) == 2


def test_kernels_run_by_a_host_copy_raise_no_floating_point_warnings():
    # inf - inf is a NaN on the device, without a flag; the kernel runs while a later
    # aclrtMemcpy holds the host, outside aclrtSynchronizeStream
    import warnings

    from opsim.kernels import aclnn
    rt = AclRuntime("atlas-a2", trace_level="off")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    shape = [64, 64]

    def tensor(v):
        host = np.full(shape, v, np.float32)
        ptr, _ = rt.aclrtMalloc(host.nbytes)
        assert rt.aclrtMemcpy(ptr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return ptr, rt.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, 2, shape, ptr)
    (_, g), (_, x), (_, y), (o, out) = tensor(1.0), tensor(np.inf), tensor(np.inf), tensor(0.0)
    stream, _ = rt.aclrtCreateStream()
    ws, ex, ret = aclnn.aclnnMseLossBackwardGetWorkspaceSize(g, x, y, 0, out)
    assert ret == 0 and aclnn.aclnnMseLossBackward(0, ws, ex, stream) == 0
    big = np.zeros(1 << 22, np.uint8)
    dst, _ = rt.aclrtMalloc(big.nbytes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rt.aclrtMemcpy(dst, big.nbytes, big, big.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert all(ln.end >= 0 for ln in ex.launches)          # the kernel ran during the copy
    assert rt.aclrtSynchronizeStream(stream) == 0
    res = np.zeros(8, np.float32)
    assert rt.aclrtMemcpy(res, 32, o, 32, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert np.isnan(res).all()
