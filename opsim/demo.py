"""``opsim demo``: every operator on every product that supports it, at small shapes.

Each run is checked against the operator's golden (bitwise where the op order is modelled
exactly, else the mixed-tolerance standard), its trace is written to the output directory
(plus an HTML report per run and an index page when the report module is present), and one
table row is printed per run. Exit status 1 if any check fails.
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import numpy as np

from opsim import devices
from opsim.kernels import registry
from opsim.simulator import numerics as nx


def _check(outputs: dict[str, np.ndarray], golden: dict[str, np.ndarray]) -> str:
    """The demo row's check column: ``bitwise``, ``within tol`` (the mixed-tolerance standard),
    or ``FAIL (<output>: <what failed>)`` for the first output that fails."""
    verdicts = []
    for name, ref in golden.items():
        got = outputs.get(name)
        if got is None:
            return f"FAIL ({name}: missing)"
        if got.shape != ref.shape:
            return f"FAIL ({name}: shape {tuple(got.shape)}, golden {tuple(ref.shape)})"
        ref = np.asarray(ref)
        if got.dtype == ref.dtype and np.array_equal(np.ascontiguousarray(got).reshape(-1).view(np.uint8),
                                                      np.ascontiguousarray(ref).reshape(-1).view(np.uint8)):
            verdicts.append("bitwise")
            continue
        dt = nx.dtype(got.dtype)
        if dt.name not in nx.THRESHOLDS:
            return f"FAIL ({name}: not bitwise, and {dt.name} has no tolerance)"
        ok, info = nx.mixed_tolerance_check(got.astype(np.float64), ref.astype(np.float64), dt)
        verdicts.append("within tol" if ok else f"FAIL ({name}: {_tolerance_failure(info)})")
    if any(v.startswith("FAIL") for v in verdicts):
        return next(v for v in verdicts if v.startswith("FAIL"))
    return "bitwise" if all(v == "bitwise" for v in verdicts) else "within tol"


def _tolerance_failure(info: dict[str, Any]) -> str:
    """What failed the mixed-tolerance standard: too few elements within tolerance, or too large
    an error (either fails it, so a row at 100 % can fail)."""
    # the share rounded down, so a row short of the 99 % it needs never reads 99.0 %
    share = math.floor(info["matched_ratio"] * 1000) / 10
    parts = []
    if info["matched_ratio"] < nx.MIXED_MIN_MATCHED:
        parts.append(f"{share:.1f} % of elements within tol, {nx.MIXED_MIN_MATCHED * 100:g} % needed")
    if info["max_abs_err"] > info["max_abs_limit"]:
        parts.append(f"max abs err {info['max_abs_err']:.3g} > {info['max_abs_limit']:g}")
    return ", ".join(parts)


def demo_cases(ops: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(operator, device, dtype) for every operator (or those of ``ops``, e.g. custom ones named
    ``file.py:name``) × supporting product × supported dtype."""
    cases = []
    for op_name in (ops or registry.names()):
        op = registry.get(op_name)
        for dev in devices.catalogue():
            spec = devices.load(dev)
            if spec.series not in op.products:
                continue
            for dt in op.dtypes(spec):
                cases.append((op_name, dev, dt))
    return cases


OP_WIDTH = 36     # the operator column: the longest built-in name


def run_case(op_name: str, dev: str, dt: str, out_dir: str, reports: bool,
             width: int = OP_WIDTH) -> tuple[str, dict[str, Any] | None, bool]:
    """One demo row: run, check against the golden, write the trace (and report); ``width`` is
    the operator column's.

    Returns (printed row, index entry or None, failed). Runs in a worker process.
    """
    import opsim
    from opsim.cli_trace import report_for_result
    op = registry.get(op_name)
    spec = devices.load(dev)
    kwargs = op.example(np.random.default_rng(0), spec, dt)
    tag = f"{op_name.rpartition(':')[2] if '.py:' in op_name else op_name}-{dev}-{dt}"
    try:
        res = opsim.run(op_name, device=dev, **kwargs)
        arrays = {k: v for k, v in kwargs.items() if k in (*op.inputs, *op.optional)}
        attrs = {k: v for k, v in kwargs.items() if k in op.attrs}
        verdict = _check(res.outputs, op.golden({**{n: None for n in op.optional}, **arrays},
                                                 {**op.attrs, **attrs}))
    except Exception as exc:  # a demo row must report, not crash the table
        return f"{op_name:{width}s} {dev:20s} {dt:5s} FAILED: {type(exc).__name__}: {exc}", None, True
    s = res.stats
    trace_path = os.path.join(out_dir, f"{tag}.json")
    if res.trace is not None:
        res.trace.to_chrome_json(trace_path)
    entry = {"op": op_name, "device": dev, "dtype": dt, "cycles": res.cycles, "time_us": res.time_us,
             "bound": s.get("bound"), "check": verdict, "trace": os.path.basename(trace_path)}
    if reports:
        path = os.path.join(out_dir, f"{tag}.html")
        report_for_result(res, path)
        entry["report"] = os.path.basename(path)
    # the rate is the GM link's: HBM or DDR by device, named in the row (L2 traffic is not in it)
    row = (f"{op_name:{width}s} {dev:20s} {dt:5s} {s.get('block_dim') or '-':>5} {res.cycles:9d} "
           f"{res.time_us:9.2f} {s.get('gm_link', spec.gm.kind):>4s} {s.get('bandwidth_GBps', 0):7.1f} "
           f"{s.get('bound', '-'):7s} {verdict}")
    return row, entry, verdict.startswith("FAIL")


def run_demo(out_dir: str = "opsim-out", reports: bool = True,
             workers: int | None = None, ops: list[str] | None = None) -> int:
    """Run every demo case (in ``workers`` processes, 1 to 1024, None: the CPU count; rows print
    in a fixed order); ``ops`` restricts the table to those operators (custom ones as
    ``file.py:name``). A ``workers`` outside that range raises ValueError before any work."""
    from concurrent.futures import ProcessPoolExecutor
    from opsim.cli_trace import write_index_page
    from opsim.simulator.cargs import is_int
    from opsim.sweep import MAX_WORKERS
    # the range `opsim demo --workers` takes (cli.parse_workers): 0 ran as the default, a negative
    # count ran in process and 5000 would start a process per case
    if workers is not None:
        if not is_int(workers) or not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"run_demo: workers must be an integer from 1 to {MAX_WORKERS} "
                             f"(or None: the CPU count), got {workers!r}")
        workers = int(workers)
    try:
        cases = demo_cases(ops)
    except KeyError as exc:   # an unknown --kernel: the registry's message names what is known
        print(f"opsim demo: --kernel: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:   # e.g. a path under a regular file: said in one line, not a traceback
        print(f"opsim demo: --out {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    # the operator column fits the longest name (a custom operator's path:name can be long)
    width = max([OP_WIDTH, *(len(op) for op, _, _ in cases)])
    header = f"{'operator':{width}s} {'device':20s} {'dtype':5s} {'block':>5s} {'cycles':>9s} {'us':>9s} " \
             f"{'GM link GB/s':>12s} {'bound':7s} check"
    print(header)
    print("-" * len(header), flush=True)
    workers = workers or min(len(cases), os.cpu_count() or 1)
    failures = 0
    index: list[dict[str, Any]] = []
    t0 = time.time()
    args = [(op, dev, dt, out_dir, reports, width) for op, dev, dt in cases]
    if workers > 1:
        from opsim.study_files import watch_parent   # workers exit if the demo is killed
        with ProcessPoolExecutor(max_workers=workers, initializer=watch_parent, initargs=(os.getpid(),)) as pool:
            results = pool.map(run_case, *zip(*args))
            for row, entry, failed in results:
                failures += failed
                if entry is not None:
                    index.append(entry)
                print(row, flush=True)
    else:
        for a in args:
            row, entry, failed = run_case(*a)
            failures += failed
            if entry is not None:
                index.append(entry)
            print(row, flush=True)
    if reports and index:
        write_index_page(index, os.path.join(out_dir, "index.html"))
    print(f"\n{len(cases)} runs, {failures} failed, {time.time() - t0:.1f} s; traces in {out_dir}/"
          + (" (open index.html)" if reports and index else ""))
    return 1 if failures else 0
