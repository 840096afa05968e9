"""The ``opsim`` command line: run, demo, devices, ops (plus trace, sweep, capacity when present)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import numpy as np


def _parse_shape(text: str) -> tuple[int, ...]:
    if text in ("", "scalar", "()"):
        return ()
    try:
        return tuple(int(p) for p in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} must look like 64x4096") from None


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text, 0) if conv is int else conv(text)
        except ValueError:
            pass
    return text


def _parse_pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        for part in item.split(","):
            if not part:
                continue
            key, sep, val = part.partition("=")
            if not sep:
                raise SystemExit(f"opsim: {what} {part!r} must be KEY=VALUE")
            out[key.strip()] = _parse_value(val.strip())
    return out


def build_operands(op_name: str, device: str, dtype: str, shape: tuple[int, ...] | None, seed: int,
                   mode: str, attrs: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Random operands of the requested shape and dtype from the operator's example recipe."""
    from opsim.kernels import registry
    from opsim.api import TensorSpec, device_spec
    op = registry.get(op_name)
    spec = device_spec(device, overrides)
    rng = np.random.default_rng(seed)
    kwargs = op.example(rng, spec, dtype) if shape is None else op.example(rng, spec, dtype, shape)
    kwargs.update(attrs)
    if mode in ("timing", "estimate"):
        kwargs = {k: (TensorSpec(v.shape, v.dtype) if isinstance(v, np.ndarray) and k in
                      (*op.inputs, *op.optional) else v) for k, v in kwargs.items()}
    return kwargs


def format_result(res: Any) -> str:
    s = res.stats
    lines = [f"operator      {res.op} on {res.device} ({res.mode} mode)"]
    lines.append(f"cycles        {res.cycles}   ({res.time_us:.3f} us)")
    if s.get("block_dim") is not None:
        lines.append(f"block_dim     {s['block_dim']}   tile_length {s.get('tile_length')}   "
                     f"buffer_num {s.get('buffer_num')}")
    if "bytes_read" in s:
        lines.append(f"bytes moved   {s['bytes_read']} read, {s['bytes_written']} written")
        lines.append(f"GM bandwidth  {s['bandwidth_GBps']:.1f} GB/s achieved of {s['peak_bandwidth_GBps']:.1f} "
                     f"GB/s peak ({100 * s['bandwidth_GBps'] / max(s['peak_bandwidth_GBps'], 1e-9):.0f}%)")
    if s.get("pipe_utilisation"):
        util = ", ".join(f"{p} {100 * u:.0f}%" for p, u in sorted(s["pipe_utilisation"].items()))
        lines.append(f"pipes busy    {util}  (busiest core)")
    if "ub_peak_bytes" in s:
        lines.append(f"UB peak       {s['ub_peak_bytes']} B")
    if "bound" in s:
        lines.append(f"bound         {s['bound']}: {s.get('bound_reason', '')}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    import opsim
    from opsim.kernels.common import OpError
    from opsim.simulator.errors import SimulatorError
    attrs = _parse_pairs(args.attr, "--attr")
    if args.reduction is not None:
        attrs["reduction"] = _parse_value(args.reduction)
    overrides = _parse_pairs(args.set, "--set")
    tiling = _parse_pairs(args.tiling, "--tiling")
    if args.kernel:
        args.op = args.kernel          # a custom operator: path/to/file.py:name
    if not args.op:
        print("opsim: name an operator (see `opsim ops`) or --kernel FILE.py:name", file=sys.stderr)
        return 2
    try:
        kwargs = build_operands(args.op, args.device, args.dtype, args.shape, args.seed, args.mode, attrs, overrides)
        res = opsim.run(args.op, device=args.device, mode=args.mode, trace=args.trace_level,
                        tiling=tiling or None, seed=args.seed, device_overrides=overrides or None, **kwargs)
    except OpError as exc:
        print(f"opsim: rejected with status {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except (SimulatorError, KeyError, TypeError, ValueError) as exc:
        print(f"opsim: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"op": res.op, "device": res.device, "mode": res.mode, "cycles": res.cycles,
                          "time_us": res.time_us, "stats": res.stats}, default=str, indent=1))
    else:
        print(format_result(res))
    if args.trace and res.trace is not None:
        res.trace.to_chrome_json(args.trace)
        print(f"trace         {args.trace} ({len(res.trace)} slices)")
    if args.report:
        from opsim.cli_trace import report_for_result
        report_for_result(res, args.report)
        print(f"report        {args.report}")
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from opsim.devices import catalogue_table
    print(catalogue_table(args.names or None, provenance=not args.brief))
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from opsim.kernels import registry
    for name in registry.names():
        op = registry.get(name)
        print(f"{name:40s} products: {', '.join(op.products)}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from opsim.demo import run_demo
    return run_demo(out_dir=args.out, reports=not args.no_report, workers=args.workers, ops=args.kernel)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="opsim", description="Ascend-style operator simulator and emulator")
    sub = ap.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run one operator on a simulated device")
    r.add_argument("op", nargs="?", help="operator name (see `opsim ops`)")
    r.add_argument("--kernel", help="a custom operator: FILE.py:name registered with opsim.register_operator")
    r.add_argument("--device", default="atlas-a2", help="device name or TOML path (see `opsim devices`)")
    r.add_argument("--shape", type=_parse_shape, default=None, help="main operand shape, e.g. 64x4096")
    r.add_argument("--dtype", default="fp32", help="fp32, fp16 or bf16")
    r.add_argument("--reduction", default=None, help="none, mean or sum (or 0/1/2)")
    r.add_argument("--attr", action="append", help="operator attribute KEY=VALUE (repeatable)")
    r.add_argument("--mode", default="full", choices=("full", "timing", "numeric", "estimate"))
    r.add_argument("--tiling", action="append", help="tiling override, e.g. block_dim=8,tile_length=4096")
    r.add_argument("--set", action="append", help="device field override, e.g. ub.size=262144")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--trace", help="write a Chrome/Perfetto JSON trace to this file")
    r.add_argument("--trace-level", default="instruction", choices=("off", "launch", "tile", "instruction"))
    r.add_argument("--report", help="write a self-contained HTML report to this file")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("devices", help="print the device catalogue with provenance")
    d.add_argument("names", nargs="*", help="devices to show (default: all)")
    d.add_argument("--brief", action="store_true", help="omit the source/assumption texts")
    d.set_defaults(func=cmd_devices)

    o = sub.add_parser("ops", help="list the operators")
    o.set_defaults(func=cmd_ops)

    m = sub.add_parser("demo", help="run every operator on every product that supports it and check goldens")
    m.add_argument("--out", default="opsim-out", help="directory for traces and reports")
    m.add_argument("--no-report", action="store_true", help="skip the HTML reports")
    m.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    m.add_argument("--kernel", action="append", help="only this operator (repeatable); custom ones as FILE.py:name")
    m.set_defaults(func=cmd_demo)

    from opsim import cli_check, cli_study, cli_trace
    cli_trace.register(sub)
    cli_study.register(sub)
    cli_check.register(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
