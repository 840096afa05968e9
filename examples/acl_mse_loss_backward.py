"""The seed's CANN calling sequence for aclnnMseLossBackward, against the simulated device.

init -> set device -> create stream -> malloc -> memcpy H2D -> create tensors ->
GetWorkspaceSize -> malloc workspace -> execute -> synchronize -> memcpy D2H -> destroy -> finalize

Run: python examples/acl_mse_loss_backward.py [--device atlas-a2]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from opsim.kernels.aclnn import aclnnMseLossBackward, aclnnMseLossBackwardGetWorkspaceSize
from opsim.simulator.acl import (ACL_FLOAT, ACL_FORMAT_ND, ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEMCPY_DEVICE_TO_HOST,
                           ACL_MEMCPY_HOST_TO_DEVICE, AclRuntime)


def check(ret: int, what: str, rt: AclRuntime) -> None:
    if ret != 0:
        sys.exit(f"{what} failed: {ret}: {rt.aclGetRecentErrMsg()}")


def create_tensor(rt: AclRuntime, host: np.ndarray) -> tuple[int, object]:
    """aclrtMalloc + aclrtMemcpy H2D + aclCreateTensor with contiguous strides."""
    size = host.nbytes
    dev_ptr, ret = rt.aclrtMalloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "aclrtMalloc", rt)
    check(rt.aclrtMemcpy(dev_ptr, size, host, size, ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy", rt)
    shape = list(host.shape)
    strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    tensor = rt.aclCreateTensor(shape, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, dev_ptr)
    if tensor is None:
        sys.exit(f"aclCreateTensor failed: {rt.aclGetRecentErrMsg()}")
    return dev_ptr, tensor


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="atlas-a2")
    ap.add_argument("--csv", help="write the op_summary CSV (one row per kernel launch) and the per-core "
                                  "and hot-spot tables beside it (docs/profiling.md)")
    args = ap.parse_args(argv)

    shape = (2, 4)
    grad_output = np.arange(8, dtype=np.float32).reshape(shape) * 0.5
    self_host = np.linspace(-1, 1, 8, dtype=np.float32).reshape(shape)
    target = np.ones(shape, dtype=np.float32)
    out_host = np.zeros(shape, dtype=np.float32)
    reduction = 1  # mean

    rt = AclRuntime(args.device, profile=True)   # profile: collect msprof-style tables (--csv)
    check(rt.aclInit(None), "aclInit", rt)
    check(rt.aclrtSetDevice(0), "aclrtSetDevice", rt)
    stream, ret = rt.aclrtCreateStream()
    check(ret, "aclrtCreateStream", rt)

    g_ptr, g = create_tensor(rt, grad_output)
    s_ptr, s = create_tensor(rt, self_host)
    t_ptr, t = create_tensor(rt, target)
    o_ptr, o = create_tensor(rt, out_host)

    workspace_size, executor, ret = aclnnMseLossBackwardGetWorkspaceSize(g, s, t, reduction, o)
    check(ret, "aclnnMseLossBackwardGetWorkspaceSize", rt)
    workspace = 0
    if workspace_size > 0:
        workspace, ret = rt.aclrtMalloc(workspace_size, ACL_MEM_MALLOC_HUGE_FIRST)
        check(ret, "aclrtMalloc(workspace)", rt)
    check(aclnnMseLossBackward(workspace, workspace_size, executor, stream), "aclnnMseLossBackward", rt)
    check(rt.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream", rt)
    if args.csv:   # not an ACL call: what msprof would collect, written before the device goes away
        check(rt.write_tables(args.csv), "write_tables", rt)
    records = rt.launch_records()

    check(rt.aclrtMemcpy(out_host, out_host.nbytes, o_ptr, out_host.nbytes, ACL_MEMCPY_DEVICE_TO_HOST),
          "aclrtMemcpy D2H", rt)
    for i, v in enumerate(out_host.reshape(-1)):
        print(f"result[{i}] is: {v:.6f}")
    launch = executor.launches[0]
    print(f"simulated {launch.cycles} cycles = {rt.spec.cycles_to_us(launch.cycles):.3f} us on {rt.spec.name}, "
          f"block_dim {launch.block_dim}")
    # end to end: from aclrtSetDevice to the D2H copy's end, host<->device copies timed on the
    # device's host link ([host] of the device file)
    end_to_end = rt.elapsed_cycles
    print(f"end to end {end_to_end} cycles = {rt.spec.cycles_to_us(end_to_end):.3f} us, of which "
          f"{rt.host_copy_count} host copies {rt.spec.cycles_to_us(rt.host_copy_cycles):.3f} us")

    for tensor in (g, s, t, o):
        rt.aclDestroyTensor(tensor)
    for ptr in (g_ptr, s_ptr, t_ptr, o_ptr) + ((workspace,) if workspace else ()):
        rt.aclrtFree(ptr)
    rt.aclrtDestroyStream(stream)
    rt.aclrtResetDevice(0)
    rt.aclFinalize()
    return {"out": out_host, "cycles": launch.cycles, "launch_records": records,
            "end_to_end_cycles": end_to_end, "host_copy_cycles": rt.host_copy_cycles}


if __name__ == "__main__":
    main()
