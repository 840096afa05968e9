"""aclnnEmbeddingDenseBackward on Atlas A2: the launches of one call and their simulated time.

8192 rows x embeddingDim 1024, fp32 grad, int32 indices drawn uniformly from [0, V) (seed 0),
V in {2048, 32000, 151936}, default attributes (no padding, no scaling, determinism off), full
mode (real data, so the flushes follow the real index runs). ``--deterministic`` runs the
aclnn's deterministic setting (ACL_OPT_DETERMINISTIC); ``--dtype bf16`` / ``fp16`` a 2-byte grad
(uncast when (numel(grad) + numel(out)) x 2 B >= 100 MiB, e.g. V 151936). Prints one row per V with the
call's kernel time and each launch's time (issue to end: launch overhead and gap included).
Host<->device copies are not part of it (examples/acl_mse_loss_backward.py shows an
end-to-end time).

Run: python benchmarks/embedding_a2.py [--rows N] [--dim D] [--v V ...] [--mode full|timing]
     [--deterministic] [--dtype fp32|fp16|bf16]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import opsim  # noqa: E402


def run_one(rows: int, dim: int, v: int, mode: str, device: str, deterministic: bool = False,
            dtype: str = "fp32") -> tuple[float, int, list[tuple[str, float]]]:
    rng = np.random.default_rng(0)
    idx = rng.integers(0, v, rows).astype(np.int32)
    np_dt = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    grad = (rng.standard_normal((rows, dim)).astype(np.float32).astype(np_dt) if mode == "full"
            else opsim.TensorSpec((rows, dim), dtype))
    res = opsim.run("embedding_dense_backward", device=device, mode=mode, trace="launch", grad=grad,
                    indices=idx, num_weights=v, deterministic=deterministic)
    spec = opsim.device_spec(device)
    parts = [(s.name, spec.cycles_to_us(s.end - s.start)) for s in res.trace.slices(process="host")]
    return res.time_us, res.cycles, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--v", type=int, nargs="+", default=[2048, 32000, 151936])
    ap.add_argument("--mode", choices=("full", "timing"), default="full")
    ap.add_argument("--device", default="atlas-a2")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32")
    a = ap.parse_args()
    print(f"aclnnEmbeddingDenseBackward, {a.device}, {a.rows} rows x D {a.dim}, {a.dtype}, int32 uniform indices, "
          f"mode={a.mode}, deterministic={a.deterministic}")
    print(f"{'V':>8} {'cycles':>10} {'time_us':>9}  launches (us, issue to end)")
    for v in a.v:
        t, c, parts = run_one(a.rows, a.dim, v, a.mode, a.device, a.deterministic, a.dtype)
        print(f"{v:>8} {c:>10} {t:>9.1f}  " + ", ".join(f"{n} {u:.1f}" for n, u in parts))


if __name__ == "__main__":
    main()
