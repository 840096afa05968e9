"""``opsim check FILE.py:kernel``: run a kernel under the sanitizer and print its findings.

``kernel`` is an operator the file registers (``opsim.register_operator``): it runs through
``opsim.run(..., sanitize=True)`` with random inputs of ``--shape``/``--dtype``. Or it is a plain
``@asc.jit`` kernel: its ``asc.GlobalAddress`` parameters get random arrays of ``--shape`` and
``--dtype``, the other parameters come from ``--arg NAME=VALUE``, and it is launched on
``--block-dim`` blocks. Exit status 0 when the run is clean, 1 with findings (the machine fault
that ended a run is one), 2 for a call that could not run.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from typing import Any, Callable, Mapping

import numpy as np


def register(sub: Any) -> None:
    from opsim.cli import _parse_seed, _parse_shape
    c = sub.add_parser("check", help="run a kernel under the sanitizer (racecheck, memcheck, synccheck)")
    c.add_argument("target", help="FILE.py:kernel (an operator the file registers, or an @asc.jit kernel)")
    c.add_argument("--shape", type=_parse_shape, default=None,
                   help="input shape, e.g. 8x2048 (default: the operator's example shape; 2048 for an @asc.jit kernel)")
    c.add_argument("--dtype", default="fp32", help="fp32, fp16 or bf16 (default: fp32)")
    c.add_argument("--device", default="atlas-a2", help="device name (see `opsim devices`; default: atlas-a2)")
    c.add_argument("--attr", action="append", help="operator attribute KEY=VALUE (repeatable)")
    c.add_argument("--tiling", action="append", help="tiling override, e.g. block_dim=8")
    c.add_argument("--arg", action="append", help="@asc.jit kernel: a scalar parameter NAME=VALUE")
    c.add_argument("--block-dim", type=int, default=None,
                   help="@asc.jit kernel: blocks to launch (default 1; an operator takes --tiling block_dim=N)")
    c.add_argument("--seed", type=_parse_seed, default=0, help="seed of the random inputs (an integer >= 0)")
    c.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from opsim import devices
    from opsim.cli import _parse_pairs, error_text
    from opsim.kernels import registry
    from opsim.kernels.common import OpError
    from opsim.simulator.errors import SimulatorError
    path, sep, name = args.target.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        print(f"opsim check: target {args.target!r} must be FILE.py:kernel", file=sys.stderr)
        return 2
    try:
        # the device first: a wrong name would otherwise surface behind whatever else is missing
        devices.load(args.device)
    except devices.SpecError as exc:
        print(f"opsim check: {error_text(exc)}", file=sys.stderr)
        return 2
    try:
        module = registry.load_file(path)
    except KeyError as exc:
        print(f"opsim check: {exc.args[0]}", file=sys.stderr)
        return 2
    obj = getattr(module, name, None)
    if obj is None:
        print(f"opsim check: {path} has no {name!r}", file=sys.stderr)
        return 2
    try:
        if getattr(obj, "__opsim_operator__", None) is not None or registry.known(args.target):
            _refuse_options(args, "a registered operator", arg="--attr KEY=VALUE",
                            block_dim="--tiling block_dim=N")
            report, fault = _check_operator(args, _parse_pairs(args.attr, "--attr"),
                                            _parse_pairs(args.tiling, "--tiling"))
        elif type(obj).__name__ == "JitFunction":
            _refuse_options(args, "an @asc.jit kernel", attr="--arg NAME=VALUE", tiling="--block-dim N")
            report, fault = _check_jit(args, obj, _parse_pairs(args.arg, "--arg"))
        else:
            print(f"opsim check: {name} is neither a registered operator nor an @asc.jit kernel", file=sys.stderr)
            return 2
    except OpError as exc:
        print(f"opsim check: rejected with status {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KernelRaised as exc:
        print(f"opsim check: {exc}", file=sys.stderr)
        return 2
    except (SimulatorError, TypeError, ValueError, KeyError) as exc:
        print(f"opsim check: {error_text(exc)}", file=sys.stderr)
        return 2
    print(report)
    if fault is not None:
        print(f"\nthe run failed: {fault}")
    # the three checks always; "fault" (a machine fault that is none of theirs: a kernel's
    # Python bug, an unsupported call) when there is one, so the counts add up to the findings
    checks = ["racecheck", "memcheck", "synccheck"]
    checks += sorted({f.check for f in report.findings} - set(checks))
    counts = {c: len(report.by_check(c)) for c in checks}
    print(f"\nopsim check {args.target}: " + ("clean" if report.ok else
          f"{len(report.findings)} finding(s): " + ", ".join(f"{c} {n}" for c, n in counts.items())))
    return 0 if report.ok else 1


def _refuse_options(args: argparse.Namespace, kind: str, **instead: str) -> None:
    """A ValueError for an option given that ``kind`` does not take (it would be ignored and the
    check run with defaults the user did not ask for), saying what to give instead."""
    for dest, use in instead.items():
        if getattr(args, dest) is not None:
            opt = "--" + dest.replace("_", "-")
            raise ValueError(f"{opt} does not apply to {args.target} ({kind}); give {use}")


def _check_operator(args: argparse.Namespace, attrs: dict, tiling: dict) -> tuple[Any, Any]:
    import opsim
    from opsim.cli import build_operands
    from opsim.simulator.errors import SimulatorError
    kwargs = build_operands(args.target, args.device, args.dtype, args.shape, args.seed, "full", attrs)
    try:
        res = opsim.run(args.target, device=args.device, tiling=tiling or None, seed=args.seed,
                        sanitize=True, trace="off", **kwargs)
    except SimulatorError as exc:
        bug = _python_bug(exc)
        if bug is not None:
            # the kernel's Python raised (the device wrapped it as "internal error in a kernel"):
            # a call that could not run, as for an @asc.jit kernel -- not a finding
            raise KernelRaised(bug) from exc
        report = getattr(exc, "sanitizer", None)
        if report is None:
            raise
        return report, exc
    return res.sanitizer, None


def _python_bug(exc: Any) -> str | None:
    """"the kernel raised NameError: ... (at kernel line F:N)" when ``exc`` is the device's
    wrapper of an exception the kernel's own code raised, else None."""
    from opsim.simulator.errors import chain_kernel_line_note
    cause = getattr(exc, "kernel_exception", None)
    note = chain_kernel_line_note(cause) if cause is not None else None
    if note is None:        # not an opsim.asc kernel's line: leave it to the report
        return None
    return f"the kernel raised {type(cause).__name__}: {cause} ({note})"


class KernelRaised(Exception):
    """The kernel's Python raised (a bug in it, not a finding): one line naming its line."""


def _annotation(p: inspect.Parameter) -> str:
    """A parameter's annotation as text (``asc.GlobalAddress`` whether a string or the class)."""
    return p.annotation if isinstance(p.annotation, str) else str(getattr(p.annotation, "__name__", ""))


_SCALAR_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    # the annotation's type -> (what to give, whether a parsed --arg value is one)
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
}


def _scalar_type(p: inspect.Parameter) -> str | None:
    """"int", "float" or "bool" for a parameter annotated so (``asc.ConstExpr[int]`` too), else None."""
    text = _annotation(p)
    inner = re.fullmatch(r"(?:asc\.)?ConstExpr\[(\w+)\]", text)
    text = inner.group(1) if inner else text
    return text if text in _SCALAR_TYPES else None


def _check_arg_types(jf: Any, params: Mapping[str, inspect.Parameter], values: dict) -> None:
    """A ValueError for an --arg whose value is not of its parameter's annotated type: the kernel
    would run with it (a string as a length raised inside the kernel; 2.5 as a buffer count
    laid out misaligned buffers and reported that as a finding)."""
    for name, value in values.items():
        kind = _scalar_type(params[name])
        if kind is not None and not _SCALAR_TYPES[kind][1](value):
            raise ValueError(f"--arg {name}={value!r}: {jf.fn.__name__}'s parameter {name!r} is annotated {kind}; "
                             f"give {_SCALAR_TYPES[kind][0]}")


def _check_jit(args: argparse.Namespace, jf: Any, values: dict) -> tuple[Any, Any]:
    from opsim.asc._core import kernel_line_note
    from opsim.devices.names import did_you_mean
    from opsim.simulator import numerics as nx
    from opsim.simulator.errors import SimulatorError
    rng = np.random.default_rng(args.seed)
    shape = args.shape or (2048,)
    dt = nx.dtype(args.dtype).np_dtype
    params = inspect.signature(jf.fn).parameters
    scalars = [p.name for p in params.values() if "GlobalAddress" not in _annotation(p)]
    for name in values:
        if name not in scalars:
            # a misspelt --arg would otherwise be dropped and the kernel run with its default
            raise ValueError(f"--arg {name}: {jf.fn.__name__} has no scalar parameter {name!r}"
                             f"{did_you_mean(name, scalars)}; its scalar parameters: "
                             f"{', '.join(scalars) or 'none'} (asc.GlobalAddress parameters get arrays "
                             f"of --shape/--dtype)")
    _check_arg_types(jf, params, values)
    call = []
    for p in params.values():
        if "GlobalAddress" in _annotation(p):
            call.append(rng.standard_normal(shape).astype(np.float32).astype(dt))
        elif p.name in values:
            call.append(values[p.name])
        elif p.default is not inspect.Parameter.empty:
            call.append(p.default)
        else:
            raise ValueError(f"{jf.fn.__name__}: give parameter {p.name!r} with --arg {p.name}=VALUE "
                             f"(asc.GlobalAddress parameters get arrays of --shape/--dtype)")
    try:
        blocks = 1 if args.block_dim is None else args.block_dim
        res = jf[blocks, None](*call, device=args.device, sanitize=True, trace="off")
    except SimulatorError as exc:
        report = getattr(exc, "sanitizer", None)
        if report is None:
            raise
        return report, exc
    except Exception as exc:
        note = kernel_line_note(exc)
        if note is None:    # not raised by the kernel's own code: the launch refused the call
            raise
        raise KernelRaised(f"the kernel raised {type(exc).__name__}: {exc} ({note})") from exc
    return res.sanitizer, None
