"""A 1,000-point estimate-mode study, timed: the acceptance figure of the estimate's speed.

The element-wise example study (examples/studies/elementwise_tiling_a2_a3.toml) widened to
1,000 points: 2 devices x 2 operators x 2 dtypes x 5 shapes (256 Ki to 64 Mi elements) x 5
block_dims x 5 tile lengths, swept in estimate mode with ``--workers`` processes (default 2).
Every point is estimated: the tile lengths all fit the UB of both devices for both operators
and dtypes (the largest, 4864, is the largest multiple of 256 that BCE fp32 -- 40 B of UB per
element, the most of the four -- fits in the 192 KiB UB). A point the operator refused would
still be one row (status "error", its status code and message, as every sweep records it); it
is counted apart and makes the benchmark fail, since the figure is for 1,000 estimates.
Prints the wall time, the points estimated and refused, and the point wall in the workers.

    .venv/bin/python benchmarks/estimate_speed.py [--workers 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opsim.sweep import sweep  # noqa: E402

STUDY = {
    "study": {"name": "estimate-speed-1000", "mode": "estimate",
              "description": "element-wise study widened to 1,000 points (benchmarks/estimate_speed.py)"},
    "axes": {
        "device": ["atlas-a2", "atlas-a3"],
        "operator": ["mse_loss_backward", "binary_cross_entropy_backward"],
        "shape": [[1 << 18], [1 << 20], [1 << 22], [1 << 24], [1 << 26]],
        "dtype": ["fp32", "fp16"],
        "tiling": {"block_dim": [1, 8, 16, 32, 48], "tile_length": [1024, 2048, 3072, 4096, 4864]},
        "attr": {"reduction": ["mean"]},
    },
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = sweep(STUDY, Path(tmp) / "speed.sqlite", workers=args.workers, quiet=True)
        wall = time.perf_counter() - t0
        rows = res.rows()
    ok = [r for r in rows if r["status"] == "ok"]
    refused = Counter(r["error_code"] for r in rows if r["status"] != "ok")
    models = sorted({r["estimate_model"] for r in ok})
    codes = ", ".join(f"{c}: {n}" for c, n in sorted(refused.items(), key=str))
    print(f"estimate study: {len(rows)} points, {len(ok)} estimated, {sum(refused.values())} refused"
          f"{f' (status codes {codes})' if refused else ''}"
          f" in {wall:.2f} s with {args.workers} workers ({1e3 * wall / max(1, len(rows)):.1f} ms a point); "
          f"models: {', '.join(models)}; point wall in the workers: "
          f"{1e3 * sum(r['wall_s'] for r in rows) / max(1, len(rows)):.1f} ms mean, "
          f"{1e3 * max(r['wall_s'] for r in rows):.0f} ms max")
    if len(ok) != len(rows) or len(rows) != 1000:
        print("FAIL: the figure is for 1,000 estimated points", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
