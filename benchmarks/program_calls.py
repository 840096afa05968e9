"""Python calls on the program side of the exact engine, per FLCE L1 chunk (counted, not timed).

The program side is what happens before a pipe runs anything: the kernel generator builds its
instructions, the queue framework (TQue alloc/enque/deque/free, emit) adds flag instructions,
and the program stream (simulator/fastforward.py) stamps them and hands them to the dispatcher.
Counted here: every call -- Python functions, generator resumptions and C functions, as
``sys.setprofile`` reports them -- made while the program stream runs (a ProgramStream
``__next__`` or ``_batches`` frame is on the stack), plus the calls of ``LocalTensor.check``
(the operand checks of the instructions when they issue). Also printed: the CPU seconds of one
unprofiled run (``time.process_time``; the machine may be shared) and, with ``--total``, all
Python calls of a run per chunk (cProfile).

    python benchmarks/program_calls.py [--shape 1024 4096 8192] [--top 20] [--total]
    python benchmarks/program_calls.py --mse 16777216 [--top 20]

The workload is benchmarks/flce_exact_profile.py's (exact FLCE schedule, bf16, atlas-a2), per
cube L1 chunk; with ``--mse N`` the timing-mode MSE backward of N fp32 elements on atlas-a2
(benchmarks/run.py's ``mse_timing``), per UB tile (the tiles are counted: one ``Mul`` each).
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import importlib.util
import pathlib
import pstats
import sys
import time
from types import CodeType, FrameType
from typing import Any, Callable

from opsim.simulator import fastforward, tile

_spec = importlib.util.spec_from_file_location(
    "flce_exact_profile", pathlib.Path(__file__).resolve().parent / "flce_exact_profile.py")
assert _spec is not None and _spec.loader is not None
flce = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(flce)


def _stream_codes() -> set[CodeType]:
    codes = {fastforward.ProgramStream.__next__.__code__}
    batches = getattr(fastforward.ProgramStream, "_batches", None)
    if batches is not None:
        codes.add(batches.__code__)
    return codes


def mse_run(n: int) -> int:
    """Run the timing-mode MSE backward of ``n`` fp32 elements; its UB tiles (one Mul each)."""
    from opsim import api
    real_device = api.Device
    tiles = [0]

    class _Tiles:
        def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
            if instr.name == "Mul":
                tiles[0] += 1

    def device(*a: Any, **kw: Any) -> Any:
        dev = real_device(*a, **kw)
        dev.observers.append(_Tiles())
        return dev

    api.Device = device                              # type: ignore[misc]
    try:
        _run_module().mse_timing(n)
    finally:
        api.Device = real_device                     # type: ignore[misc]
    return tiles[0]


def _run_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_run", pathlib.Path(__file__).resolve().parent / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def count_calls(bt: int, h: int, v: int, top: int = 0,
                workload: Callable[[], Any] | None = None) -> tuple[int, int, collections.Counter]:
    """(program-stream calls, LocalTensor.check calls, calls by function when ``top``) of one run
    (of ``workload`` if given, else the FLCE shape)."""
    stream_codes, check_code = _stream_codes(), tile.LocalTensor.check.__code__
    depth = [0, 0]
    counts = [0, 0]
    names: collections.Counter = collections.Counter()

    def profiler(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code in stream_codes:
                depth[0] += 1
            elif code is check_code:
                depth[1] += 1
                counts[1] += 1
                return
            if depth[0]:
                counts[0] += 1
                if top:
                    names[f"{code.co_name} ({pathlib.Path(code.co_filename).name})"] += 1
            elif depth[1]:
                counts[1] += 1
        elif event == "c_call":
            if depth[0]:
                counts[0] += 1
                if top:
                    names[f"C {getattr(arg, '__qualname__', arg)}"] += 1
            elif depth[1]:
                counts[1] += 1
        elif event == "return":
            code = frame.f_code
            if code in stream_codes:
                depth[0] -= 1
            elif code is check_code:
                depth[1] -= 1

    sys.setprofile(profiler)
    try:
        if workload is not None:
            workload()
        else:
            flce.run(bt, h, v)
    finally:
        sys.setprofile(None)
    return counts[0], counts[1], names


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=3, default=(1024, 4096, 8192), metavar=("BT", "H", "V"))
    ap.add_argument("--top", type=int, default=0, metavar="N", help="also list the N most called functions")
    ap.add_argument("--total", action="store_true", help="also count every call of a run (cProfile)")
    ap.add_argument("--mse", type=int, default=0, metavar="N",
                    help="count the timing-mode MSE backward of N fp32 elements instead, per UB tile")
    args = ap.parse_args(argv)
    bt, h, v = args.shape
    if args.mse:
        n = mse_run(args.mse)                  # warm-up, and the tile count
        unit = "tile"
        t0 = time.process_time()
        _run_module().mse_timing(args.mse)
        cpu = time.process_time() - t0
        stream, check, names = count_calls(bt, h, v, args.top, workload=lambda: _run_module().mse_timing(args.mse))
        print(f"MSE backward timing, {args.mse} fp32 on atlas-a2: {n} UB tiles")
    else:
        n = flce.chunks(bt, h, v)
        unit = "chunk"
        t0 = time.process_time()
        flce.run(bt, h, v)
        cpu = time.process_time() - t0
        stream, check, names = count_calls(bt, h, v, args.top)
        print(f"FLCE exact, BT {bt} / H {h} / V {v} bf16 on atlas-a2: {n} L1 chunks")
    print(f"  CPU {cpu:.2f} s = {cpu / n * 1e6:.0f} us per {unit} (one run, this process)")
    print(f"  program-stream calls   {stream / n:8.1f} per {unit}")
    print(f"  LocalTensor.check calls {check / n:7.1f} per {unit}")
    print(f"  program side in all    {(stream + check) / n:8.1f} per {unit}")
    for key, c in names.most_common(args.top):
        print(f"    {c / n:8.2f}  {key}")
    out = {"chunks": n, "cpu_s": cpu, "stream_calls_per_chunk": stream / n,
           "check_calls_per_chunk": check / n}
    if args.total:
        prof = cProfile.Profile()
        prof.enable()
        if args.mse:
            _run_module().mse_timing(args.mse)
        else:
            flce.run(bt, h, v)
        prof.disable()
        total = pstats.Stats(prof).total_calls    # type: ignore[attr-defined]
        print(f"  all Python calls       {total / n:8.0f} per {unit} (cProfile)")
        out["calls_per_chunk"] = total / n
    return out


if __name__ == "__main__":
    main()
