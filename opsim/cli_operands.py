"""The operands of ``opsim run``: from the operator's example recipe, per-operand overrides, and
what ``opsim ops NAME`` prints about an operator.

- ``--shape`` is the recipe's shape (``opsim ops NAME`` says what it means for that operator,
  e.g. BTxHxV for fused_linear_cross_entropy_loss_grad);
- ``--attr KEY=VALUE`` sets an operator attribute, or a parameter of the example recipe (such as
  FLCE's ``mode=high_performance``, which decides which optional operands it makes);
- ``--operand NAME=SPEC`` sets one operand: ``64x128`` (shape), ``64x128:fp16`` (shape and
  dtype), ``:int32`` (dtype), ``none`` (leave an optional operand out) or ``@file.npy`` (data);
- timing and estimate modes build no host data: operands are shapes (``TensorSpec``) taken from
  the operator's ``example_shapes`` recipe; full and numeric modes check the host memory the
  random operands need before making them.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["build", "describe", "recipe_params", "default_dtype", "parse_operand", "format_operands",
           "format_check", "CliError"]

# the leading parameters of every example recipe; the ones after the shape are variants
_FIXED = ("rng", "spec", "dtype")


class CliError(ValueError):
    """A command-line value that cannot be used; the message names the option."""


def _example_signature(op: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(op.example).parameters.values())


def shape_param(op: Any) -> inspect.Parameter | None:
    """The recipe's shape (or size) parameter: the one after rng, spec and dtype."""
    params = _example_signature(op)
    return params[3] if len(params) > 3 and params[3].name not in op.attrs else None


def recipe_params(op: Any) -> dict[str, Any]:
    """Keyword parameters of the example recipe after the shape (variants), with defaults."""
    params = _example_signature(op)[4:]
    return {p.name: p.default for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in op.attrs}


def recipe_attr_params(op: Any) -> set[str]:
    """The operator attributes the example recipe takes as keyword parameters too."""
    return {p.name for p in _example_signature(op)[4:] if p.name in op.attrs}


def default_dtype(op: Any, spec: Any) -> str:
    """fp32 when the operator supports it on ``spec``, else its first supported dtype."""
    dts = tuple(op.dtypes(spec))
    return "fp32" if "fp32" in dts or not dts else dts[0]


def parse_operand(text: str, names: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``NAME=SPEC`` -> (name, {"none": True} | {"file": path} | {"shape": ..., "dtype": ...})."""
    from opsim.cli import _parse_shape
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name:
        raise CliError(f"--operand {text!r} must be NAME=SPEC (SPEC: 64x128, 64x128:fp16, :int32, none "
                       f"or @file.npy)")
    if name not in names:
        raise CliError(f"--operand {name!r}: not an operand; operands are {', '.join(names)}")
    if spec.lower() == "none":
        return name, {"none": True}
    if spec.startswith("@"):
        return name, {"file": spec[1:]}
    shape_text, _, dtype = spec.partition(":")
    out: dict[str, Any] = {}
    if shape_text:
        try:
            out["shape"] = _parse_shape(shape_text)
        except Exception:
            raise CliError(f"--operand {name}: shape {shape_text!r} must look like 64x128") from None
        if any(s < 0 for s in out["shape"]):
            raise CliError(f"--operand {name}: shape {shape_text!r} has a negative dimension")
    if dtype:
        out["dtype"] = dtype.strip()
    if not out:
        raise CliError(f"--operand {text!r}: give a shape, :dtype, none or @file.npy")
    return name, out


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    from opsim.simulator import numerics as nx
    d = nx.dtype(dtype)
    if d.is_float:
        return rng.standard_normal(shape).astype(np.float32).astype(d.np_dtype)
    if d.np_dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, size=shape).astype(d.np_dtype)


def _nbytes(shape: Sequence[int], dtype: Any) -> int:
    from opsim.simulator import numerics as nx
    n = nx.dtype(dtype).itemsize
    for s in shape:
        n *= int(s)
    return n


def build(op_name: str, spec: Any, dtype: str | None, shape: tuple[int, ...] | None, seed: int, mode: str,
          attrs: Mapping[str, Any], operand_args: Sequence[str] = ()) -> dict[str, Any]:
    """The keyword arguments of ``opsim.run`` for one ``opsim run`` command line."""
    from opsim.api import TensorSpec
    from opsim.kernels import registry
    from opsim.limits import HostMemoryError, _fmt, host_memory_budget
    from opsim.simulator import numerics as nx
    op = registry.get(op_name)
    tensors = (*op.inputs, *op.optional)
    variants = recipe_params(op)
    op_attrs = {k: v for k, v in attrs.items() if k in op.attrs}
    variant = {k: v for k, v in attrs.items() if k in variants and k not in op.attrs}
    # an attribute the recipe also takes shapes its operands (the DSP BCE's reduction none: a
    # dloss per element): the recipe gets it too
    variant.update({k: v for k, v in op_attrs.items() if k in recipe_attr_params(op)})
    for k in attrs:
        if k not in op_attrs and k not in variant:
            allowed = [*op.attrs, *variants]
            hint = " (the run mode is --mode)" if k == "mode" else ""
            raise CliError(f"--attr {k}: {op_name} has no attribute or example parameter {k!r}{hint}; "
                           f"allowed: {', '.join(allowed) or 'none'} (see `opsim ops {op_name}`)")
    dtype = dtype or default_dtype(op, spec)
    args: tuple[Any, ...] = () if shape is None else (shape,)
    overrides = dict(parse_operand(t, [*tensors, *op.outputs]) for t in operand_args)
    shapes_only = mode in ("timing", "estimate")

    if op.example_shapes is not None:
        plan = dict(op.example_shapes(spec, dtype, *args, **variant))
    else:  # an operator without a shape-only recipe: its example's data gives the shapes
        data = op.example(np.random.default_rng(seed), spec, dtype, *args, **variant)
        plan = {k: ((v.shape, v.dtype) if isinstance(v, np.ndarray) else v) for k, v in data.items()}
    for name, o in overrides.items():
        if o.get("none"):
            plan.pop(name, None)
        elif "file" in o:
            try:
                arr = np.load(o["file"], mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise CliError(f"--operand {name}=@{o['file']}: cannot load a .npy array ({exc})") from None
            plan[name] = arr
        else:
            old = plan.get(name)
            old_shape, old_dtype = old if isinstance(old, tuple) else ((), dtype)
            new_shape: Sequence[int] = o["shape"] if "shape" in o else old_shape
            plan[name] = (tuple(new_shape), o.get("dtype", old_dtype))
            try:
                nx.dtype(plan[name][1])
            except ValueError as exc:     # names the dtype and the allowed names, as --dtype does
                raise CliError(f"--operand {name}: {exc}") from None
            except Exception:
                raise CliError(f"--operand {name}: unknown dtype {plan[name][1]!r}") from None

    if not shapes_only:
        need = sum(_nbytes(*v) for k, v in plan.items() if k in tensors and isinstance(v, tuple))
        budget = host_memory_budget()
        if need > budget:
            raise HostMemoryError(f"{op_name}: the random operands alone need {_fmt(need)} of host memory, "
                                  f"over the budget of {_fmt(budget)}; use --mode timing or estimate "
                                  f"(no data) or raise OPSIM_HOST_MEMORY_BUDGET")

    kwargs: dict[str, Any] = {}
    rng = np.random.default_rng(seed)
    recipe_data: Mapping[str, Any] | None = None
    for k, v in plan.items():
        if isinstance(v, np.ndarray):   # from a file
            kwargs[k] = TensorSpec(v.shape, v.dtype) if shapes_only else np.ascontiguousarray(v)
        elif isinstance(v, tuple) and k in (*tensors, *op.outputs):
            if shapes_only:
                kwargs[k] = TensorSpec(v[0], v[1])
            elif k in overrides or op.example_shapes is None:
                kwargs[k] = _random(rng, v[0], v[1])
            else:
                if recipe_data is None:   # the recipe's own data (its value ranges), made once
                    recipe_data = op.example(np.random.default_rng(seed), spec, dtype, *args, **variant)
                kwargs[k] = recipe_data[k]
        else:
            kwargs[k] = v
    kwargs.update(op_attrs)
    return kwargs


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(s)) for s in shape) or "scalar"


def format_operands(kwargs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    """``operands      grad_output 64x256 fp32, ...`` and ``outputs ...`` lines."""
    from opsim.simulator import numerics as nx

    def one(name: str, v: Any) -> str:
        try:
            dt = nx.dtype(v.dtype).name
        except Exception:
            dt = str(v.dtype)
        return f"{name} {_shape_text(v.shape)} {dt}"

    ins = [one(k, v) for k, v in kwargs.items() if hasattr(v, "shape") and hasattr(v, "dtype")]
    lines = [f"operands      {', '.join(ins)}"] if ins else []
    outs = [one(k, v) for k, v in outputs.items() if hasattr(v, "shape")]
    if outs:
        lines.append(f"outputs       {', '.join(outs)}")
    return "\n".join(lines)


def format_check(res: Any) -> str:
    """What numeric mode computed and how: per output its range, non-finite count and digest."""
    import hashlib
    lines = ["check         outputs computed by the operator's numpy golden (the kernel's documented "
             "op order); no simulation, no cycles"]
    for name, arr in res.outputs.items():
        a = np.asarray(arr)
        f = a.astype(np.float64) if a.size else np.zeros(0)
        finite = np.isfinite(f)
        rng_text = (f"min {f[finite].min():.6g}, max {f[finite].max():.6g}, mean {f[finite].mean():.6g}"
                    if finite.any() else "no finite values")
        digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
        lines.append(f"  {name:12s}{_shape_text(a.shape)} {rng_text}; {int(a.size - finite.sum())} "
                     f"non-finite; sha256 {digest}")
    return "\n".join(lines)


def describe(name: str, device: str | None = None) -> str:
    """The ``opsim ops NAME`` text: summary, products, dtypes, operands, attributes, recipe."""
    from opsim import devices as _devices
    from opsim.kernels import registry
    op = registry.get(name)
    lines = [f"{op.name}", f"  {op.summary}" if op.summary else "",
             f"products      {', '.join(op.products)}"]
    lines = [l for l in lines if l]
    dts = []
    for d in ([device] if device else _devices.catalogue()):
        spec = _devices.load(d)
        if spec.series in op.products:
            dts.append(f"{d}: {', '.join(op.dtypes(spec))}")
    if dts:
        lines.append(f"dtypes        {'; '.join(dts)}")
    lines.append(f"inputs        {', '.join(op.inputs)}")
    if op.optional:
        lines.append(f"optional      {', '.join(op.optional)}   (--operand NAME=none leaves one out)")
    lines.append(f"outputs       {', '.join(op.outputs)}")
    attrs = [f"{k} (required)" if k in op.required or v is None and k in op.required else f"{k}={v!r}"
             for k, v in op.attrs.items()]
    lines.append(f"attributes    {', '.join(attrs) or 'none'}   (--attr KEY=VALUE)")
    sp = shape_param(op)
    if sp is not None:
        default = sp.default
        shown = _shape_text(default) if isinstance(default, tuple) else str(default)
        doc = (inspect.getdoc(op.example_shapes or op.example) or "").split("\n\n")[0].replace("\n", " ")
        doc = doc.removeprefix("``example`` without data: ")
        lines.append(f"--shape       {sp.name}, default {shown}" + (f": {doc}" if doc else ""))
    variants = recipe_params(op)
    if variants:
        lines.append("--attr        example recipe: " + ", ".join(f"{k}={v!r}" for k, v in variants.items()))
    lines.append("--operand     NAME=64x128[:dtype] | NAME=:dtype | NAME=none | NAME=@file.npy")
    return "\n".join(lines)
