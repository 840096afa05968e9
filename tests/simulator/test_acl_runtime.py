"""The ACL runtime around the operators, called as a framework calls CANN: copies on a device
whose work has faulted, lifecycle codes and allocation policies."""
from __future__ import annotations

import numpy as np

from opsim.kernels import aclnn
from opsim.simulator import acl
from opsim.simulator.acl import AclRuntime


def _rt() -> AclRuntime:
    rt = AclRuntime("atlas-a2", trace_level="off")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    return rt


def _queue_a_faulting_launch(rt: AclRuntime):
    """A launch whose operands reach far past their 64 B allocation, queued on a stream: it
    faults as soon as simulated time lets it run."""
    ptr, _ = rt.aclrtMalloc(64)
    big = [64, 64]
    ts = [rt.aclCreateTensor(big, acl.ACL_FLOAT, None, 0, 2, big, ptr) for _ in range(4)]
    stream, _ = rt.aclrtCreateStream()
    ws, ex, ret = aclnn.aclnnMseLossBackwardGetWorkspaceSize(*ts[:3], 1, ts[3])
    assert ret == 0 and aclnn.aclnnMseLossBackward(0, ws, ex, stream) == 0
    return stream


def test_a_host_copy_on_a_faulted_device_moves_no_byte():
    rt = _rt()
    dev_buf, _ = rt.aclrtMalloc(64)
    assert rt.aclrtMemcpy(dev_buf, 64, np.full(64, 1, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    stream = _queue_a_faulting_launch(rt)
    assert rt.aclrtSynchronizeStream(stream) == acl.ACL_ERROR_RT_AICORE_EXCEPTION
    # the device keeps the fault: a host copy fails and changes nothing on either side
    assert rt.aclrtMemcpy(dev_buf, 64, np.full(64, 9, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == \
        acl.ACL_ERROR_RT_AICORE_EXCEPTION
    assert np.all(rt.device.read(dev_buf, 64) == 1)            # the device memory is untouched
    host = np.full(64, 5, np.uint8)
    assert rt.aclrtMemcpy(host, 64, dev_buf, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == \
        acl.ACL_ERROR_RT_AICORE_EXCEPTION
    assert np.all(host == 5)                                   # the host array too
    msg = rt.aclGetRecentErrMsg()
    assert "aclrtMemcpy" in msg and "nothing was copied" in msg and "aclrtResetDevice" in msg


def test_a_host_copy_during_which_queued_work_faults_moves_no_byte():
    # the copy holds the host for its time on the host link; the queued launch runs and faults
    # meanwhile, so the copy reports the fault -- and must then not have copied
    rt = _rt()
    dev_buf, _ = rt.aclrtMalloc(64)
    _queue_a_faulting_launch(rt)
    assert rt.aclrtMemcpy(dev_buf, 64, np.full(64, 9, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == \
        acl.ACL_ERROR_RT_AICORE_EXCEPTION
    assert np.all(rt.device.read(dev_buf, 64) == 0)
    assert "during the copy" in rt.aclGetRecentErrMsg()
    rt2 = _rt()
    src, _ = rt2.aclrtMalloc(64)
    assert rt2.aclrtMemcpy(src, 64, np.full(64, 7, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    _queue_a_faulting_launch(rt2)
    host = np.full(64, 5, np.uint8)
    assert rt2.aclrtMemcpy(host, 64, src, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_ERROR_RT_AICORE_EXCEPTION
    assert np.all(host == 5)
    # aclrtResetDevice releases the device and the fault
    assert rt.aclrtResetDevice(0) == 0 and rt.aclrtSetDevice(0) == 0
    fresh, _ = rt.aclrtMalloc(64)
    assert rt.aclrtMemcpy(fresh, 64, np.full(64, 9, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert np.all(rt.device.read(fresh, 64) == 9)


def test_a_refused_device_address_advances_no_simulated_time():
    rt = _rt()
    t0, copies = rt.elapsed_cycles, rt.host_copy_count
    assert rt.aclrtMemcpy(12345, 64, np.zeros(64, np.uint8), 64, acl.ACL_MEMCPY_HOST_TO_DEVICE) == \
        acl.ACL_ERROR_INVALID_PARAM
    assert rt.aclrtMemcpy(np.zeros(64, np.uint8), 64, 12345, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST) == \
        acl.ACL_ERROR_INVALID_PARAM
    assert (rt.elapsed_cycles, rt.host_copy_count) == (t0, copies)


def test_finalize_twice_is_repeat_finalize():
    # CANN's aclError table: ACL_ERROR_REPEAT_FINALIZE 100037 is a repeated aclFinalize
    rt = _rt()
    assert rt.aclFinalize() == 0
    assert rt.aclFinalize() == 100037                          # ACL_ERROR_REPEAT_FINALIZE
    assert "aclFinalize" in rt.aclGetRecentErrMsg() and "already finalized" in rt.aclGetRecentErrMsg()
    assert rt.aclInit() == 0 and rt.aclFinalize() == 0          # init / finalize may repeat in order
    assert rt.aclFinalize() == 100037
    never = AclRuntime("atlas-a2", trace_level="off")
    assert never.aclFinalize() == acl.ACL_ERROR_UNINITIALIZE
    assert getattr(acl, "ACL_ERROR_REPEAT_FINALIZE", None) == 100037


def test_malloc_takes_any_integer_policy_and_refuses_other_types():
    # aclrtMemMallocPolicy: the page policies combine with the bandwidth flags by bitwise or, and
    # a value outside the enum is no error (CANN picks the page size from the size)
    rt = _rt()
    for policy in (0, 1, 2, 2 | 0x1000, 0 | 0x0100, 99, np.int32(1)):
        ptr, ret = rt.aclrtMalloc(64, policy)
        assert ret == 0 and ptr, policy
    used = rt.device.gm.allocated_bytes
    for policy in ("x", None, 1.0, True):
        assert rt.aclrtMalloc(64, policy) == (0, acl.ACL_ERROR_INVALID_PARAM), policy
        msg = rt.aclGetRecentErrMsg()
        assert "aclrtMalloc: policy" in msg and repr(policy) in msg
    assert rt.device.gm.allocated_bytes == used                 # a refused call allocates nothing
    assert (acl.ACL_MEM_MALLOC_HUGE_FIRST, acl.ACL_MEM_MALLOC_HUGE_ONLY, acl.ACL_MEM_MALLOC_NORMAL_ONLY,
            acl.ACL_MEM_TYPE_LOW_BAND_WIDTH, acl.ACL_MEM_TYPE_HIGH_BAND_WIDTH) == (0, 1, 2, 0x0100, 0x1000)


def test_set_device_names_the_value_it_refused():
    # the string "0" printed as 0 gave "device id 0 is invalid; ... one device, id 0"
    rt = AclRuntime("atlas-a2", trace_level="off")
    assert rt.aclInit() == 0
    assert rt.aclrtSetDevice("0") == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert "device id '0' is invalid" in rt.aclGetRecentErrMsg()
    assert rt.aclrtSetDevice(1) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert "device id 1 is invalid" in rt.aclGetRecentErrMsg()
