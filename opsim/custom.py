"""Custom operators: a user's kernel as an operator of ``opsim.run``, ``opsim run``, studies and
the demo report (docs/custom-operators.md).

``opsim.register_operator`` turns a kernel -- an ``opsim.asc`` ``@asc.jit`` kernel or a
generator kernel of the simulator's own kernel language (``def kernel(ctx, ...)``) -- into an
:class:`~opsim.kernels.common.OpDef` in the operator registry, next to the built-in operators::

    def tiling(spec, inputs, attrs):            # host side: a pure function
        n = inputs["x"].numel
        return {"block_dim": 8, "block_length": n // 8}

    @opsim.register_operator(inputs=("x", "y"), outputs=("z",), tiling=tiling,
                             golden=lambda x, y: {"z": x + y})
    @asc.jit
    def my_add(x, y, z, block_length: int): ...

    opsim.run("my_add", x=a, y=b)               # in this process
    opsim.run("path/to/file.py:my_add", x=a, y=b)   # anywhere: the file is imported on first use

The kernel's parameters are filled by name: the GM tensors (inputs, then outputs), the values
of the tiling function's result (every key but ``block_dim`` and ``core_mask``) and the
operator's attributes. ``tiling(spec, inputs, attrs)`` gets the device spec, the inputs as
:class:`~opsim.kernels.common.TensorDesc` (shape, dtype, numel, nbytes) and the attributes, and
returns a mapping (or a dataclass) with at least ``block_dim``; ``opsim.run(tiling={...})``
overrides any of its keys.
"""
from __future__ import annotations

import inspect
import traceback
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels import registry
from opsim.kernels.common import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ACLNN_ERR_INNER_TILING_ERROR,
                                  OpDef, OpError, TensorDesc, acl_dtype_name, check_product, plain_overrides)
from opsim.simulator import numerics as nx

__all__ = ["register_operator", "KernelTiling"]

_ASCEND_SERIES = ("training", "inference", "a2", "a3", "200i-500-a2")


@dataclass(frozen=True)
class KernelTiling:
    """The tiling of a custom operator: its ``block_dim`` (and core mask) and the values the
    host tiling function computed for the kernel's parameters."""

    block_dim: int
    args: Mapping[str, Any] = field(default_factory=dict)
    core_mask: int | None = None

    @property
    def tile_length(self) -> Any:
        return self.args.get("tile_length")

    @property
    def buffer_num(self) -> Any:
        return self.args.get("buffer_num")


def register_operator(kernel: Any = None, *, name: str | None = None, inputs: Sequence[str],
                      outputs: Sequence[str], tiling: Callable[..., Any], attrs: Mapping[str, Any] | None = None,
                      golden: Callable[..., Any] | None = None, dtypes: Sequence[str] = ("fp32",),
                      products: Sequence[str] | None = None, example_shape: Sequence[int] = (8, 2048),
                      infer: Callable[..., Mapping[str, tuple[Sequence[int], Any]]] | None = None,
                      unit: str = "vector", summary: str = "") -> Any:
    """Register ``kernel`` as operator ``name`` (default: the kernel's name); returns the kernel.

    Use it as a decorator (``@opsim.register_operator(inputs=..., ...)`` above ``@asc.jit``)
    or call it (``opsim.register_operator(kernel, inputs=..., ...)``).

    Args:
        inputs, outputs: names of the GM tensors, matching the kernel's parameter names.
        tiling: ``(spec, inputs, attrs) -> {"block_dim": ..., <kernel parameter>: ...}``.
        attrs: attribute names and defaults (passed to the kernel, the tiling and the golden).
        golden: ``(**inputs, **attrs) -> {output: array}`` (or one array for one output), an
            independent numpy reference; the demo report checks the result against it.
        dtypes: the dtypes the operator accepts (every input must have one of them).
        products: device series that run it (default: every Ascend series).
        example_shape: the input shape of the demo report and ``opsim run`` without ``--shape``.
        infer: ``(spec, inputs, attrs) -> {output: (shape, dtype)}``; default: every output has
            the shape and dtype of the first input.
        unit: the cores a generator kernel runs on ("vector" or "cube"); an ``@asc.jit`` kernel's
            kind comes from what it calls, as in opsim.asc.
    """
    if kernel is None:
        return lambda k: register_operator(k, name=name, inputs=inputs, outputs=outputs, tiling=tiling,
                                           attrs=attrs, golden=golden, dtypes=dtypes, products=products,
                                           example_shape=example_shape, infer=infer, unit=unit, summary=summary)
    op_name = name or getattr(kernel, "__name__", None)
    if not op_name:
        raise ValueError("register_operator: give the operator a name= (the kernel has no __name__)")
    inputs, outputs = tuple(inputs), tuple(outputs)
    if not inputs or not outputs:
        raise ValueError(f"register_operator({op_name!r}): inputs and outputs must name at least one tensor each")
    if set(inputs) & set(outputs):
        raise ValueError(f"register_operator({op_name!r}): {sorted(set(inputs) & set(outputs))} are both inputs "
                         f"and outputs")
    _check_host_function(op_name, "tiling", tiling)
    if infer is not None:
        _check_host_function(op_name, "infer", infer)
    attrs = dict(attrs or {})
    dtypes = tuple(nx.dtype(d).name for d in dtypes)
    products = tuple(products) if products is not None else _ASCEND_SERIES
    params = _kernel_params(kernel)
    missing = [n for n in (*inputs, *outputs) if n not in params]
    if missing:
        raise ValueError(f"register_operator({op_name!r}): the kernel has no parameter {missing[0]!r} "
                         f"(its parameters: {', '.join(params)})")

    def validate(spec: DeviceSpec, descs: Mapping[str, TensorDesc | None], at: Mapping[str, Any]) -> dict:
        check_product(spec, op_name, products)
        _check_attr_kinds(op_name, attrs, at)
        for n in inputs:
            if descs.get(n) is None:
                raise OpError(ACLNN_ERR_PARAM_NULLPTR, f"{n} is a null pointer; it is required")
        for n in inputs:
            d = descs[n]
            assert d is not None            # checked just above
            if d.dtype.name not in dtypes:
                raise OpError(ACLNN_ERR_PARAM_INVALID,
                              f"{n} has dtype {acl_dtype_name(d.dtype)}; {op_name} supports "
                              f"{', '.join(acl_dtype_name(nx.dtype(t)) for t in dtypes)}")
        return out_descs(spec, descs, at)

    def out_descs(spec: DeviceSpec, descs: Mapping[str, TensorDesc | None], at: Mapping[str, Any]) -> dict:
        if infer is not None:
            got = _call_host(op_name, "infer", infer, ACLNN_ERR_PARAM_INVALID, spec, {n: descs[n] for n in inputs}, at)
            try:
                return {n: TensorDesc(tuple(int(s) for s in got[n][0]), nx.dtype(got[n][1])) for n in outputs}
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise TypeError(f"{op_name}: infer= returned {got!r}; it must return {{output: (shape, dtype)}} "
                                f"for every output ({', '.join(outputs)}): {type(exc).__name__}: {exc}") from None
        first = descs[inputs[0]]
        assert first is not None            # validated, or inferred only when every input is given
        return {n: TensorDesc(first.shape, first.dtype) for n in outputs}

    def infer_outputs(spec: DeviceSpec, descs: Mapping[str, TensorDesc | None], at: Mapping[str, Any]) -> dict:
        _check_attr_kinds(op_name, attrs, at)       # before infer= reads them
        if any(descs.get(n) is None for n in inputs):
            return {n: None for n in outputs}
        return out_descs(spec, descs, at)

    def plan(spec: DeviceSpec, descs: Mapping[str, TensorDesc | None], at: Mapping[str, Any],
             overrides: Mapping[str, Any] | None = None) -> KernelTiling:
        got = _call_host(op_name, "tiling", tiling, ACLNN_ERR_INNER_TILING_ERROR, spec,
                         {n: descs[n] for n in inputs}, at)
        values = dict(asdict(got) if is_dataclass(got) and not isinstance(got, type) else got)
        for k, v in plain_overrides(overrides).items():
            if k not in values and k not in ("block_dim", "core_mask") and k not in params:
                raise OpError(ACLNN_ERR_PARAM_INVALID,
                              f"unknown tiling override {k!r} for {op_name}; allowed: block_dim, core_mask, "
                              f"{', '.join(sorted(set(values) - {'block_dim', 'core_mask'}))}")
            values[k] = v
        block_dim = values.pop("block_dim", None)
        if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)) or block_dim < 1:
            raise OpError(ACLNN_ERR_INNER_TILING_ERROR,
                          f"{op_name}: the tiling function gave block_dim={block_dim!r}; it must be an integer >= 1")
        return KernelTiling(int(block_dim), values, values.pop("core_mask", None))

    def launch(device: Any, stream: Any, tensors: Mapping[str, Any], kt: KernelTiling,
               at: Mapping[str, Any]) -> list:
        named = {**{k: v for k, v in at.items()}, **kt.args,
                 **{n: tensors[n] for n in (*inputs, *outputs)}}
        return [_launch(device, stream, kernel, op_name, kt, named, unit)]

    def golden_fn(arrays: Mapping[str, np.ndarray], at: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if golden is None:
            raise OpError(ACLNN_ERR_PARAM_INVALID, f"{op_name} has no golden (register_operator(golden=...))")
        got = golden(**{n: np.asarray(arrays[n]) for n in inputs}, **dict(at))
        if not isinstance(got, Mapping):
            got = {outputs[0]: got}
        return {n: np.asarray(got[n]) for n in outputs}

    def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = dtypes[0],
                shape: Sequence[int] = tuple(example_shape)) -> dict[str, Any]:
        dt = nx.dtype(dtype).np_dtype
        ops: dict[str, Any] = {n: rng.standard_normal(tuple(shape)).astype(np.float32).astype(dt) for n in inputs}
        ops.update({k: v for k, v in attrs.items() if v is not None})
        return ops

    op = OpDef(name=op_name, inputs=inputs, outputs=outputs, attrs=attrs, products=products,
               validate=validate, plan=plan, launch=launch, golden=golden_fn, example=example,
               infer=infer_outputs, dtypes=lambda spec: dtypes, summary=summary or f"custom kernel {op_name}")
    registry.register(op)
    try:
        kernel.__opsim_operator__ = op_name
    except (AttributeError, TypeError):  # pragma: no cover - objects without a __dict__
        pass
    return kernel


def _check_host_function(op_name: str, what: str, fn: Any) -> None:
    """Refuse, when the operator is registered, a ``tiling=`` or ``infer=`` that cannot be called
    as opsim calls it -- ``fn(spec, inputs, attrs)`` -- naming it and the form, rather than a
    bare "takes 1 positional argument" TypeError at its first run."""
    form = f"{what}(spec, inputs, attrs)"
    if not callable(fn):
        raise TypeError(f"register_operator({op_name!r}): {what}= must be a callable {form}; got {type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):     # a callable Python cannot introspect: its first call tells
        return
    try:
        sig.bind(None, None, None)
    except TypeError as exc:
        shown = f"{getattr(fn, '__name__', type(fn).__name__)}{sig}"
        raise TypeError(f"register_operator({op_name!r}): {what}= must be called as {form}; "
                        f"{shown} does not take those 3 arguments ({exc})") from None


def _attr_kind(default: Any) -> tuple[str, Callable[[Any], bool]] | None:
    """What an attribute with this default takes: its description and a test; None: anything."""
    if isinstance(default, (bool, np.bool_)):
        return "True or False", lambda v: isinstance(v, (bool, np.bool_))
    if isinstance(default, (int, np.integer)):
        return "an integer", lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if isinstance(default, (float, np.floating)):
        return "a number", lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if isinstance(default, str):
        return "a string", lambda v: isinstance(v, str)
    return None


def _check_attr_kinds(op_name: str, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Refuse (161002) an attribute whose value is not of its default's kind -- a string for a
    number, say, as ``opsim run --attr alpha=abc`` passes it -- before the kernel gets it and
    fails inside a vector call with "could not convert string to float"."""
    for name, default in defaults.items():
        kind = _attr_kind(default)
        if kind is not None and name in given and given[name] is not None and not kind[1](given[name]):
            raise OpError(ACLNN_ERR_PARAM_INVALID, f"{op_name}: attribute {name}={given[name]!r} must be {kind[0]} "
                                                   f"(its default is {default!r})")


def _call_host(op_name: str, what: str, fn: Callable[..., Any], code: int, spec: DeviceSpec,
               descs: Mapping[str, TensorDesc | None], at: Mapping[str, Any]) -> Any:
    """``fn(spec, descs, attrs)``; an exception it raises (other than an OpError, its own refusal)
    becomes an OpError with ``code`` naming the function, the exception, its line and the inputs
    -- the host half of the operator failed for these operands, which a bare "max() arg is an
    empty sequence" out of ``opsim run`` does not say. The original is the error's ``__cause__``."""
    try:
        return fn(spec, descs, dict(at))
    except OpError:
        raise
    except Exception as exc:
        name = getattr(fn, "__name__", type(fn).__name__)
        frames = traceback.extract_tb(exc.__traceback__)[1:]      # [0] is this call
        own = getattr(getattr(fn, "__code__", None), "co_filename", None)
        # the innermost line of the function's own file (not of numpy, say), else the innermost
        frame = next((f for f in reversed(frames) if f.filename == own), frames[-1] if frames else None)
        where = f" (at {frame.filename}:{frame.lineno})" if frame is not None else ""
        given = ", ".join(f"{n} {'x'.join(map(str, d.shape)) or 'scalar'} {d.dtype.name}" if d is not None
                          else f"{n} none" for n, d in descs.items())
        raise OpError(code, f"{op_name}: the {what} function {name}(spec, inputs, attrs) raised "
                            f"{type(exc).__name__}: {exc}{where}; inputs: {given}") from exc


def _is_jit(kernel: Any) -> bool:
    return type(kernel).__name__ == "JitFunction" and type(kernel).__module__ == "opsim.asc.jit"


def _kernel_params(kernel: Any) -> list[str]:
    fn = kernel.fn if _is_jit(kernel) else kernel
    names = list(inspect.signature(fn).parameters)
    return names if _is_jit(kernel) else names[1:]          # a generator kernel's first is ctx


def _launch(device: Any, stream: Any, kernel: Any, name: str, kt: KernelTiling, named: Mapping[str, Any],
            unit: str = "vector") -> Any:
    """Queue ``kt.block_dim`` blocks of ``kernel`` on ``stream`` of ``device``, its parameters
    filled by name from ``named``; returns the Launch."""
    if _is_jit(kernel):
        return _launch_jit(device, stream, kernel, name, kt, named)
    params = list(inspect.signature(kernel).parameters.values())[1:]
    args = [_arg(name, p, named) for p in params]
    return device.launch(stream, kernel, kt.block_dim, *args, unit=unit, core_mask=kt.core_mask, name=name)


def _arg(op: str, p: inspect.Parameter, named: Mapping[str, Any]) -> Any:
    if p.name in named:
        return named[p.name]
    if p.default is not inspect.Parameter.empty:
        return p.default
    raise OpError(ACLNN_ERR_INNER_TILING_ERROR,
                  f"{op}: kernel parameter {p.name!r} is neither a tensor, nor a value of the tiling function, "
                  f"nor an attribute (given: {', '.join(sorted(named))})")


def _launch_jit(device: Any, stream: Any, jf: Any, name: str, kt: KernelTiling, named: Mapping[str, Any]) -> Any:
    """An ``@asc.jit`` kernel launched on an existing device and stream (opsim.run's), its GM
    tensors passed as ``asc.GlobalAddress`` parameters -- the blocks run exactly as in
    ``kernel[block_dim, stream](...)`` (opsim.asc.jit.launch)."""
    from opsim.asc.jit import launch_on
    from opsim.asc.tensor import GlobalAddress
    from opsim.simulator.tile import GlobalTensor

    args = []
    gm_tensors = []
    for p in inspect.signature(jf.fn).parameters.values():
        v = _arg(name, p, named)
        if isinstance(v, GlobalTensor):
            gm_tensors.append(v)
            v = GlobalAddress(device, v.addr, v.dtype, v.numel)
        args.append(v)
    return launch_on(device, stream, jf, kt.block_dim, tuple(args), {}, options=jf.options,
                     core_mask=kt.core_mask, name=name, gm_tensors=tuple(gm_tensors))
