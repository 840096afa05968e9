"""The aclnn two-phase entry points (docs/sources.md#aclnn-host-pattern), generic over OpDefs.

``aclnnXxxGetWorkspaceSize(inputs..., outputs...)`` checks its out-parameters, runs the
operator's documented checks in order, plans the tiling and returns
``(workspace_size, executor, status)``; ``aclnnXxx(workspace, workspace_size, executor, stream)``
queues the kernels on the stream and returns a status. Neither raises: every failure is a status
code with a message in the runtime's error log (``rt.aclGetRecentErrMsg()``). A fault inside a
kernel surfaces, as on hardware, at ``aclrtSynchronizeStream``.

Handles are checked before anything runs: every tensor must be a live tensor of one runtime
(not destroyed, not from before aclFinalize/aclrtResetDevice, its memory not freed), and the
executor, the stream and the workspace must belong to that same runtime and device; otherwise
161002 (161001 for a null stream or executor) and nothing is queued.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from opsim.kernels.common import (ACLNN_ERR_INNER, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR,
                            ACLNN_ERR_RUNTIME_ERROR, ACLNN_SUCCESS, OpDef, OpError, TensorDesc)
from opsim.kernels.ascend.flce_grad import PARAM as FLCE_PARAM
from opsim.kernels.registry import get as get_op
from opsim.simulator.acl import AclRuntime, AclStream, AclTensor, is_int
from opsim.simulator.errors import SimulatorError
from opsim.simulator.tile import GlobalTensor
from opsim.simulator import numerics as nx

log = logging.getLogger("opsim.aclnn")


@dataclass
class AclOpExecutor:
    """What GetWorkspaceSize prepared: the operator, its operands, attributes and tiling."""

    op: OpDef
    runtime: AclRuntime
    tensors: dict[str, AclTensor | None]
    attrs: dict[str, Any]
    tiling: Any
    workspace_size: int
    empty: bool = False
    used: bool = False
    launches: list = field(default_factory=list)
    generation: int = 0          # the runtime's device generation at GetWorkspaceSize
    names: Mapping[str, str] = field(default_factory=dict)   # operand key -> C parameter name


def _runtime_of(tensors: Mapping[str, Any]) -> AclRuntime | None:
    for t in tensors.values():
        if isinstance(t, AclTensor):
            return t.runtime
    return None


def _desc(t: AclTensor) -> TensorDesc:
    """What validation and planning see of an aclTensor: view shape, dtype, strides, format."""
    return TensorDesc(t.view_shape, t.dtype, None if t.is_contiguous else t.strides, t.format)


def get_workspace_size(op_name: str, tensors: Mapping[str, AclTensor | None], attrs: Mapping[str, Any],
                       api: str, names: Mapping[str, str] | None = None) -> tuple[int, AclOpExecutor | None, int]:
    """``names``: the documented C parameter name of each operand key that differs from it
    (``grad_output`` is ``gradOutput``), so that a message names the argument the caller passed."""
    op = get_op(op_name)
    rt = _runtime_of(tensors)
    names = dict(names or {})
    try:
        if rt is None:
            raise OpError(ACLNN_ERR_PARAM_NULLPTR, "no tensor operand is set: nothing to run")
        for name, t in tensors.items():
            if t is not None and (why := rt.tensor_problem(t, names.get(name, name))) is not None:
                raise OpError(ACLNN_ERR_PARAM_INVALID, why)
        if rt.device is None:
            raise OpError(ACLNN_ERR_PARAM_NULLPTR, "no device is set: call aclrtSetDevice first")
        descs = {n: (_desc(t) if t is not None else None) for n, t in tensors.items()}
        all_attrs = {**op.attrs, **attrs}
        if rt.deterministic and "deterministic" in op.attrs and all_attrs.get("deterministic") is None:
            all_attrs["deterministic"] = True
        op.validate(rt.spec, descs, all_attrs)
        empty = op.empty(descs)
        tiling = None if empty else op.plan(rt.spec, descs, all_attrs, None)
        ws = 0 if empty else int(op.workspace(tiling))
        ex = AclOpExecutor(op, rt, dict(tensors), all_attrs, tiling, ws, empty, generation=rt.generation,
                           names=names)
        if op.check_data is not None and not empty and rt.device.functional:
            op.check_data(rt.device, {n: t.global_tensor() for n, t in tensors.items() if t is not None}, all_attrs)
        return ws, ex, ACLNN_SUCCESS
    except Exception as exc:  # never let a Python traceback cross the C-style boundary
        return 0, None, _status(exc, rt, api)


def execute(workspace: int, workspace_size: int, executor: AclOpExecutor | None, stream: AclStream | None,
            api: str) -> int:
    if executor is None or not isinstance(executor, AclOpExecutor):
        # no executor to name a runtime: the stream's (if it is one) keeps the message, so that
        # aclGetRecentErrMsg explains this failure instead of showing an older one
        owner = stream.runtime if isinstance(stream, AclStream) and isinstance(stream.runtime, AclRuntime) else None
        if executor is None:
            exc = OpError(ACLNN_ERR_PARAM_NULLPTR, "executor is null; call the GetWorkspaceSize phase first "
                                                   "and pass the executor it returned")
        else:
            exc = OpError(ACLNN_ERR_PARAM_INVALID, f"executor is a {type(executor).__name__}, not an "
                                                   f"aclOpExecutor from GetWorkspaceSize")
        return _status(exc, owner, api)
    rt = executor.runtime
    try:
        if executor.used:
            raise OpError(ACLNN_ERR_PARAM_INVALID, "executor was already run; call GetWorkspaceSize again")
        if stream is None:
            raise OpError(ACLNN_ERR_PARAM_NULLPTR, "stream is null")
        if rt.device is None or executor.generation != rt.generation:
            raise OpError(ACLNN_ERR_PARAM_INVALID, "executor was created on a device that has since been released "
                                                   "(aclrtResetDevice or aclFinalize); call GetWorkspaceSize again")
        if (why := rt.stream_problem(stream)) is not None:
            raise OpError(ACLNN_ERR_PARAM_INVALID, f"{why} (the executor's runtime owns its tensors)"
                          if "another AclRuntime" in why else why)
        for name, t in executor.tensors.items():
            if t is not None and (why := rt.tensor_problem(t, executor.names.get(name, name),
                                                          destroyed_ok=True)) is not None:
                raise OpError(ACLNN_ERR_PARAM_INVALID, why)
        if executor.workspace_size > 0:
            if not is_int(workspace_size) or workspace_size < executor.workspace_size:
                raise OpError(ACLNN_ERR_PARAM_INVALID,
                              f"workspaceSize {workspace_size!r} is smaller than the {executor.workspace_size} B "
                              f"GetWorkspaceSize asked for")
            if (why := rt.allocation_problem(workspace, executor.workspace_size, "workspace")) is not None:
                raise OpError(ACLNN_ERR_PARAM_INVALID, why)
        executor.used = True
        if executor.empty:
            return ACLNN_SUCCESS
        gts: dict[str, GlobalTensor] = {n: t.global_tensor() for n, t in executor.tensors.items() if t is not None}
        if executor.workspace_size:
            gts["workspace"] = GlobalTensor.contiguous(rt.device, int(workspace), nx.UINT8,
                                                       (executor.workspace_size,))
        executor.launches = executor.op.launch(rt.device, stream.stream, gts, executor.tiling, executor.attrs)
        return ACLNN_SUCCESS
    except Exception as exc:  # never let a Python traceback cross the C-style boundary
        return _status(exc, rt, api)


def _status(exc: Exception, rt: AclRuntime | None, api: str) -> int:
    """The status code of a failed call, with its message logged (and kept by the runtime):
    OpError carries its own code, a simulator fault is a runtime error (361001), anything else
    an internal error (561000)."""
    if isinstance(exc, OpError):
        code, message = exc.code, exc.message
    elif isinstance(exc, SimulatorError):
        code, message = ACLNN_ERR_RUNTIME_ERROR, str(exc)
    else:
        code, message = ACLNN_ERR_INNER, f"internal error: {type(exc).__name__}: {exc}"
    if rt is not None:
        rt.fail(code, f"{api}: {message}")
    else:
        log.warning("[%d] %s: %s", code, api, message)
    return code


# ---------------------------------------------------------------------------------------------
# Entry points with the documented C names and parameter order
# ---------------------------------------------------------------------------------------------

def aclnnMseLossBackwardGetWorkspaceSize(gradOutput: AclTensor | None, self: AclTensor | None,
                                         target: AclTensor | None, reduction: int,
                                         out: AclTensor | None) -> tuple[int, AclOpExecutor | None, int]:
    return get_workspace_size("mse_loss_backward",
                              {"grad_output": gradOutput, "self": self, "target": target, "out": out},
                              {"reduction": reduction}, "aclnnMseLossBackwardGetWorkspaceSize",
                              {"grad_output": "gradOutput"})


def aclnnMseLossBackward(workspace: int, workspaceSize: int, executor: AclOpExecutor | None,
                         stream: AclStream | None) -> int:
    return execute(workspace, workspaceSize, executor, stream, "aclnnMseLossBackward")


def aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(gradOutput: AclTensor | None, self: AclTensor | None,
                                                    target: AclTensor | None,
                                                    weightOptional: AclTensor | None, reduction: int,
                                                    out: AclTensor | None) -> tuple[int, AclOpExecutor | None, int]:
    return get_workspace_size("binary_cross_entropy_backward",
                              {"grad_output": gradOutput, "self": self, "target": target,
                               "weight": weightOptional, "out": out},
                              {"reduction": reduction}, "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize",
                              {"grad_output": "gradOutput", "weight": "weightOptional"})


def aclnnBinaryCrossEntropyBackward(workspace: int, workspaceSize: int, executor: AclOpExecutor | None,
                                    stream: AclStream | None) -> int:
    return execute(workspace, workspaceSize, executor, stream, "aclnnBinaryCrossEntropyBackward")


def aclnnEmbeddingDenseBackwardGetWorkspaceSize(grad: AclTensor | None, indices: AclTensor | None,
                                                numWeights: int, paddingIdx: int, scaleGradByFreq: bool,
                                                out: AclTensor | None) -> tuple[int, AclOpExecutor | None, int]:
    """paddingIdx is a uint64 in C: a negative value (or its two's-complement image) means none.
    With ``aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1)`` the deterministic scheme is used."""
    return get_workspace_size("embedding_dense_backward",
                              {"grad": grad, "indices": indices, "out": out},
                              {"num_weights": numWeights, "padding_idx": paddingIdx,
                               "scale_grad_by_freq": scaleGradByFreq},
                              "aclnnEmbeddingDenseBackwardGetWorkspaceSize")


def aclnnEmbeddingDenseBackward(workspace: int, workspaceSize: int, executor: AclOpExecutor | None,
                                stream: AclStream | None) -> int:
    return execute(workspace, workspaceSize, executor, stream, "aclnnEmbeddingDenseBackward")


def aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
        grad: AclTensor | None, input: AclTensor | None, weight: AclTensor | None,
        targetMask: AclTensor | None, maskedTarget: AclTensor | None, labelSmoothing: float,
        logitsMaxOptional: AclTensor | None, sumExpLogitsOptional: AclTensor | None,
        softmaxOptional: AclTensor | None, inputGradOut: AclTensor | None,
        weightGradOut: AclTensor | None) -> tuple[int, AclOpExecutor | None, int]:
    """The workspace holds the [BT, V] logit gradient (input dtype, NZ) and, without
    softmaxOptional (memory-saving mode), the recomputed fp32 logits."""
    return get_workspace_size("fused_linear_cross_entropy_loss_grad",
                              {"grad": grad, "input": input, "weight": weight, "target_mask": targetMask,
                               "masked_target": maskedTarget, "logits_max": logitsMaxOptional,
                               "sum_exp_logits": sumExpLogitsOptional, "softmax": softmaxOptional,
                               "input_grad": inputGradOut, "weight_grad": weightGradOut},
                              {"label_smoothing": labelSmoothing},
                              "aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize", FLCE_PARAM)


def aclnnFusedLinearCrossEntropyLossGrad(workspace: int, workspaceSize: int, executor: AclOpExecutor | None,
                                         stream: AclStream | None) -> int:
    return execute(workspace, workspaceSize, executor, stream, "aclnnFusedLinearCrossEntropyLossGrad")
