"""The seed's two C examples of binarycrossentropygrad, against a simulated DSP.

Shared storage (``_s``): operands in DDR at the seed's fixed addresses 0xA0000000..0xE0000000,
1024 elements, reduction 1 (mean), weight_defined 1, core_mask 0xff on FT78NE (0xf on MT7004).
Private storage (``_p``): operands in core 0's private memory ("L2") at 0x10000000..0x14000000,
same size and reduction, weight_defined 0. As on the bare-metal part, nothing is allocated: the
host writes the inputs straight to those addresses (the seed leaves the data unspecified; here it
is a fixed pseudo-random set), calls the library function and reads dx back.

Run: python examples/dsp_binarycrossentropygrad.py [--device ft78ne|mt7004] [--half]
(``--half`` runs the hp_ variants, MT7004 only.)
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from opsim.kernels.dsp import DspLibrary
from opsim.simulator.hthread import HThread

DEFAULT_MASK = {"ft78ne": 0xFF, "mt7004": 0xF}   # "set core mask to all cores" (docs/sources.md#dsp-msl-backend)


def check(ret: int, what: str, rt: HThread) -> None:
    if ret != 0:
        sys.exit(f"{what} failed: {ret}: {rt.get_recent_err_msg()}")


def inputs(n: int, dtype: type) -> dict[str, np.ndarray]:
    """The host-side data written before each call (fixed seed: the example is reproducible)."""
    rng = np.random.default_rng(2024)
    return {"input_x": rng.uniform(0.01, 0.99, n).astype(np.float32).astype(dtype),
            "input_y": rng.integers(0, 2, n).astype(dtype),          # labels 0 / 1
            "weight": rng.uniform(0.5, 1.5, n).astype(np.float32).astype(dtype),
            "dloss": np.array([1.0], dtype=dtype)}                    # mean: dloss[0] is used


def shared_example(rt: HThread, lib: DspLibrary, core_mask: int, half: bool) -> dict:
    dt = np.float16 if half else np.float32
    input_x = 0xA0000000     # forward input_x, DDR
    input_y = 0xB0000000     # forward input_y
    weight = 0xC0000000      # forward weight
    dloss = 0xD0000000       # upstream gradient
    dx = 0xE0000000          # output gradient dx

    input_size = 1024
    reduction = 1            # Mean
    weight_defined = 1       # true

    data = inputs(input_size, dt)
    for name, addr in (("input_x", input_x), ("input_y", input_y), ("weight", weight), ("dloss", dloss)):
        check(rt.hthread_mem_write(0, addr, data[name]), f"hthread_mem_write({name})", rt)
    fn = lib.hp_binarycrossentropygrad_s if half else lib.fp_binarycrossentropygrad_s
    check(fn(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, core_mask),
          fn.__name__, rt)
    raw, ret = rt.hthread_mem_read(0, dx, input_size * np.dtype(dt).itemsize)
    check(ret, "hthread_mem_read(dx)", rt)
    return {"inputs": data, "dx": raw.view(dt).copy(), "cycles": lib.last_group.cycles,
            "reduction": reduction, "weight_defined": weight_defined}


def private_example(rt: HThread, lib: DspLibrary, half: bool) -> dict:
    dt = np.float16 if half else np.float32
    core = 0                 # _p runs on the calling core; the bare-metal main runs on core 0
    input_x = 0x10000000     # forward input_x, L2
    input_y = 0x11000000     # forward input_y
    weight = 0x12000000      # forward weight
    dloss = 0x13000000       # upstream gradient
    dx = 0x14000000          # output gradient dx

    input_size = 1024
    reduction = 1            # Mean
    weight_defined = 0       # false

    data = inputs(input_size, dt)
    for name, addr in (("input_x", input_x), ("input_y", input_y), ("dloss", dloss)):
        check(rt.hthread_mem_write(0, addr, data[name], core_id=core), f"hthread_mem_write({name})", rt)
    fn = lib.hp_binarycrossentropygrad_p if half else lib.fp_binarycrossentropygrad_p
    check(fn(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, core=core),
          fn.__name__, rt)
    raw, ret = rt.hthread_mem_read(0, dx, input_size * np.dtype(dt).itemsize, core_id=core)
    check(ret, "hthread_mem_read(dx)", rt)
    del data["weight"]       # weight_defined = 0: never written, never read
    return {"inputs": data, "dx": raw.view(dt).copy(), "cycles": lib.last_group.cycles,
            "reduction": reduction, "weight_defined": weight_defined}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ft78ne", choices=sorted(DEFAULT_MASK))
    ap.add_argument("--half", action="store_true", help="run the hp_ (fp16) variants (MT7004 only)")
    args = ap.parse_args(argv)

    rt = HThread(args.device)
    check(rt.hthread_dev_open(0), "hthread_dev_open", rt)
    lib = DspLibrary(rt)
    results = {"shared": shared_example(rt, lib, DEFAULT_MASK[args.device], args.half),
               "private": private_example(rt, lib, args.half)}
    spec = rt.spec
    for kind, res in results.items():
        print(f"{kind}: dx[0:4] = {', '.join(f'{v:.6f}' for v in res['dx'][:4].astype(np.float32))}; "
              f"simulated {res['cycles']} cycles = {spec.cycles_to_us(res['cycles']):.2f} us on {spec.name}")
    check(rt.hthread_dev_close(0), "hthread_dev_close", rt)
    return results


if __name__ == "__main__":
    main()
