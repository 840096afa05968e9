"""The estimate of any operator from its own kernel program (simulator/replay.py).

The call is set up as ``opsim.run`` sets it up in timing mode -- operands placed in device
memory, the operator's host flow issuing its launches -- on a :class:`ReplayDevice`, whose
launches are then replayed (a sample of blocks, steady states extrapolated) instead of
simulated. Built-in operators and a user's own kernels (``opsim.register_operator``) get their
estimate this way with no second model of the kernel.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from opsim.devices.spec import DeviceSpec
from opsim.kernels.analytic import Estimate, writeback_share
from opsim.kernels.common import OpDef, TensorDesc
from opsim.simulator import numerics as nx
from opsim.simulator.errors import SimulatorError, name_kernel_line
from opsim.simulator.replay import ReplayDevice, replay_launches
from opsim.simulator.tile import GlobalTensor


# One replay device per device spec and thread (a sweep on dask runs points in threads),
# recycled from call to call: building its cores and memories costs about as much as replaying a
# point. Not for operators that place operands in a core's own memory (the DSP's private
# storage), which a recycle would not undo.
_LOCAL = threading.local()
_MAX_DEVICES = 8


def _device(spec: DeviceSpec, opdef: OpDef) -> ReplayDevice:
    if opdef.place is not None or spec.family == "dsp":
        return ReplayDevice(spec)
    devices: dict[int, tuple[DeviceSpec, ReplayDevice]] = getattr(_LOCAL, "devices", None) or {}
    _LOCAL.devices = devices
    held = devices.get(id(spec))
    if held is not None and held[0] is spec:
        held[1].recycle()
        return held[1]
    if len(devices) >= _MAX_DEVICES:
        devices.pop(next(iter(devices)))
    dev = ReplayDevice(spec)
    devices[id(spec)] = (spec, dev)
    return dev


def replay_estimate(opdef: OpDef, spec: DeviceSpec, descs: Mapping[str, TensorDesc | None],
                    attrs: Mapping[str, Any], tiling: Any) -> Estimate:
    """Cycles of ``opdef`` with this tiling on ``spec``, replayed from its kernel program."""
    dev = _device(spec, opdef)
    stream = dev.create_stream()
    placed = dict(opdef.place(dev, descs, attrs)) if opdef.place is not None else {}
    tensors: dict[str, GlobalTensor] = {}
    for name, d in descs.items():
        if d is None:
            continue
        addr = placed[name][0] if name in placed else dev.malloc(d.nbytes, name=name)
        tensors[name] = GlobalTensor.contiguous(dev, addr, d.dtype, d.shape)
    ws = int(opdef.workspace(tiling) or 0)
    if ws:
        tensors["workspace"] = GlobalTensor.contiguous(dev, dev.malloc(ws, name="workspace"), nx.UINT8, (ws,))
    launches = opdef.launch(dev, stream, tensors, tiling, attrs)
    read = sum(d.nbytes for n, d in descs.items() if d is not None and n not in opdef.outputs)
    written = sum(d.nbytes for n, d in descs.items() if d is not None and n in opdef.outputs)
    # a call that streams more than a write-back L2 holds writes back most of what it stores: the
    # replayed blocks' L2 model sees only their lines, so the share is priced on HBM as a whole
    wb = writeback_share(spec, read, written)
    dev.writeback_share = wb
    try:
        rep = replay_launches(dev, launches)
    except SimulatorError as exc:
        # a fault names the kernel line of its instruction, as the simulator's runs do (opsim.run)
        raise name_kernel_line(exc) from None
    finally:
        dev.writeback_share = 0.0
    block_dim = max((r.block_dim for r in rep.launches), default=1)
    ub = max((c.memories[m].peak_allocated_bytes for c in dev.all_cores() for m in c.memories
              if m in ("UB", "PRIVATE")), default=0)
    blocks = sum(len(r.blocks) for r in rep.launches)
    # the loads the L2 served, in the share the replayed transfers saw (the L2 model the replay's
    # cycles already priced them with): counted on the GM link they would lift its rate past peak
    seen_l2 = dev.link_bytes.get("L2 read", 0)
    seen_gm = dev.link_bytes.get(f"{spec.gm.kind} read", 0)
    l2_read = round(read * seen_l2 / (seen_l2 + seen_gm)) if seen_l2 + seen_gm else 0
    return Estimate(cycles=rep.cycles, pipe_busy=rep.pipe_busy, bytes_read=read, bytes_written=written,
                    l2_bytes_read=l2_read, gm_bytes_written=round(written * wb) if wb else None,
                    block_dim=block_dim, ub_bytes=ub, workspace_bytes=ws, launches=len(rep.launches),
                    model="replay",
                    notes=f"{len(rep.launches)} launch(es) replayed from the kernel program "
                          f"({blocks} block(s) sampled)")
