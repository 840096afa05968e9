"""Regenerate docs/estimate.md: the estimate's error against the simulator on the example studies.

Every example study (examples/studies/*.toml) is swept in estimate mode, then an evenly spaced
sample of the points that ran (every one when there are few; fewer for operators whose
simulation is slow) is run by the simulator in timing mode, and the relative error
``(estimate − simulator) / simulator`` is summarised per study, operator and estimate model.
The numbers in docs/estimate.md are the output of this script:

    .venv/bin/python benchmarks/estimate_error.py            # writes docs/estimate.md
    .venv/bin/python benchmarks/estimate_error.py --print    # prints it instead
    .venv/bin/python benchmarks/estimate_error.py --save m.json   # keeps the measurements
    .venv/bin/python benchmarks/estimate_error.py --load m.json   # the page from them, estimates recomputed
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opsim.kernels import analytic  # noqa: E402
from opsim.kernels.ascend import flce_estimate  # noqa: E402
from opsim.kernels import registry  # noqa: E402
from opsim.estimate import CLOSED_FORM_KEPT, prefer  # noqa: E402
from opsim.sweep import StudyError, load_study, run_point, run_points, sweep  # noqa: E402

# points of each study confirmed with the simulator (evenly spaced over the points that ran);
# the embedding's simulation takes 10-25 s a point, the fused linear cross-entropy's 3-80 s,
# the others well under a few seconds
SAMPLE = {"embedding_capacity_ub": 8, "flce_vocab_capacity": 8}
DEFAULT_SAMPLE = 60


def _sample(rows: list[dict], k: int) -> list[dict]:
    if len(rows) <= k:
        return rows
    step = len(rows) / k
    return [rows[int(i * step)] for i in range(k)]


def _confirm(rows: list[dict], workers: int) -> list[dict]:
    """Run the rows' parameters in timing mode; returns (row, simulator row) pairs' errors."""
    from concurrent.futures import ProcessPoolExecutor
    params = []
    for r in rows:
        p = json.loads(r["params"])
        p["mode"] = "timing"
        params.append([p])
    if workers <= 1:
        outs = [run_points(p)[0] for p in params]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outs = [o[0] for o in pool.map(run_points, params)]
    done = []
    for r, o in zip(rows, outs):
        if o["status"] == "ok":
            done.append({**r, "confirmed_cycles": o["cycles"],
                         "estimate_error": (r["cycles"] - o["cycles"]) / o["cycles"]})
        else:
            done.append({**r, "confirm_error": o["error"]})
    return done

def _both_models(row: dict) -> dict[str, int]:
    """The estimate of ``row``'s point by the replay and, where the operator still has one, by
    its closed form: model name -> cycles (run here, in this process: a few ms each)."""
    out: dict[str, int] = {}
    p = json.loads(row["params"])
    for model in ("replay", "closed-form"):
        with prefer(model):
            got = run_point(p)
        if got["status"] == "ok" and got["estimate_model"] not in out:
            out[got["estimate_model"]] = got["cycles"]
    return out


STUDIES = sorted((ROOT / "examples" / "studies").glob("*.toml"))


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _summary(errors: list[float]) -> tuple[str, ...]:
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, int(0.9 * len(a)))]
    return (str(len(a)), f"{100 * statistics.fmean(a):.2f}%", f"{100 * statistics.median(a):.2f}%",
            f"{100 * p90:.2f}%", f"{100 * a[-1]:.2f}%", _pct(min(errors)), _pct(max(errors)),
            f"{100 * sum(1 for e in a if e <= 0.10) / len(a):.0f}%")


def run(workers: int) -> dict:
    """Sweep and confirm every example study; the measurements :func:`render` turns into the page."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    used: dict[tuple[str, str], str] = {}
    worst: list[tuple[float, dict]] = []
    notes: list[str] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for path in STUDIES:
            try:
                study = load_study(path)
            except StudyError as exc:
                notes.append(f"- `{path.name}`: not run ({exc})")
                continue
            res = sweep(study, Path(tmp) / f"{path.stem}.sqlite", workers=workers, quiet=True)
            rows = res.rows()
            ok = [r for r in rows if r["status"] == "ok"]
            checked = _confirm(_sample(ok, SAMPLE.get(path.stem, DEFAULT_SAMPLE)), workers)
            confirmed = [r for r in checked if r.get("estimate_error") is not None]
            failed_confirm = [r for r in checked if r.get("confirm_error")]
            notes.append(f"- `{path.name}`: {len(rows)} points, {len(ok)} ran (the others were refused "
                         f"by the operator: tiles that do not fit, masks beyond the cores, limits), "
                         f"{len(confirmed)} of them (evenly spaced) confirmed with the simulator"
                         + (f", {len(failed_confirm)} failed in the simulator (first: "
                            f"`{failed_confirm[0]['confirm_error'][:200]}`)" if failed_confirm else ""))
            for r in confirmed:
                used[(path.stem, r["operator"])] = r["estimate_model"] or "?"
                worst.append((abs(r["estimate_error"]), r))
                for model, cycles in _both_models(r).items():
                    key = (path.stem, r["operator"], model)
                    groups.setdefault(key, []).append((cycles - r["confirmed_cycles"]) / r["confirmed_cycles"])
    wall = time.time() - t0
    return {"groups": [[list(k), v] for k, v in groups.items()], "used": [[list(k), v] for k, v in used.items()],
            "worst": [[e, r] for e, r in worst], "notes": notes, "wall": wall, "workers": workers,
            "cpus": os.cpu_count(), "operators": registry.names()}


def reestimate(data: dict) -> dict:
    """``data`` with every estimate recomputed by the current code for the points it confirmed
    (the simulator's cycles are kept): estimates cost milliseconds, the simulator minutes."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    used: dict[tuple[str, str], str] = {}
    worst = []
    for _, r in data["worst"]:
        sim = r["confirmed_cycles"]
        got = run_point(json.loads(r["params"]))
        r = {**r, "cycles": got["cycles"], "estimate_model": got["estimate_model"],
             "estimate_error": (got["cycles"] - sim) / sim}
        stem = next(k[0] for k, _ in data["groups"] if k[1] == r["operator"])
        used[(stem, r["operator"])] = r["estimate_model"]
        worst.append([abs(r["estimate_error"]), r])
        for model, cycles in _both_models(r).items():
            groups.setdefault((stem, r["operator"], model), []).append((cycles - sim) / sim)
    return {**data, "groups": [[list(k), v] for k, v in groups.items()],
            "used": [[list(k), v] for k, v in used.items()], "worst": worst}


def render(data: dict) -> str:
    """docs/estimate.md from the measurements of :func:`run` (also as saved by ``--save``)."""
    lines: list[str] = []
    groups = {tuple(k): v for k, v in data["groups"]}
    used = {tuple(k): v for k, v in data["used"]}
    worst = [(e, r) for e, r in data["worst"]]
    head = ("points", "mean abs", "median abs", "p90 abs", "max abs", "min", "max", "within 10%")
    lines.append("| study | operator | model | used | " + " | ".join(head) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(head))
    for (study, op, model), errs in sorted(groups.items()):
        mark = "yes" if used.get((study, op)) == model else "no"
        lines.append(f"| {study} | {op} | {model} | {mark} | " + " | ".join(_summary(errs)) + " |")
    worst.sort(key=lambda x: -x[0])
    wl = ["| study | operator | device | shape | dtype | tiling | overrides | attrs | estimate | simulator | error |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in worst[:8]:
        wl.append(f"| {r['study']} | {r['operator']} | {r['device']} | `{r['shape']}` | `{r['dtype']}` | "
                  f"`{r['tiling']}` | `{r['overrides']}` | `{r['attrs']}` | {r['cycles']} | "
                  f"{r['confirmed_cycles']} | {_pct(r['estimate_error'])} |")
    return TEMPLATE.format(table="\n".join(lines), worst="\n".join(wl), notes="\n".join(data["notes"]),
                           weight=analytic.LOCKSTEP_WEIGHT, drift=flce_estimate.DRIFT_LIMIT,
                           kept=", ".join(f"`{n}`" for n in sorted(CLOSED_FORM_KEPT)),
                           operators=", ".join(data["operators"]),
                           wall=f"{data['wall']:.0f}", workers=data["workers"], cpus=data["cpus"])


TEMPLATE = """# The estimate mode and its error against the simulator

`mode="estimate"` (docs/sources.md#design-modes-s7) computes cycles from the kernel program itself,
without the event loop, so a study can rank thousands of points in seconds and confirm the best
with the simulator (`opsim sweep study.toml --confirm-top K`).

<!-- generated by benchmarks/estimate_error.py: edit the template there, not this file -->

## The replay (simulator/replay.py, opsim/replay_estimate.py)

There is no second description of a kernel: the estimate sets the call up as timing mode does
(operands in device memory, the operator's host flow issuing its launches) on a device whose
launches are recorded, then replays them.

- **Costs**: each instruction's own `issue` — the vector `ceil(k·N + b)` table, pipe heads,
  LoadData bytes / L1→L0 rate, Mmad fractals / MACs per cycle, sorts, scalar ops — exactly the
  numbers the simulator spends. A DMA is what `Device.gm_transfer` plans: its start-up, the
  per-copy `base` rate plus a share of the calibrated pool (MTE2 `a + b/n`), the GM or L2 link,
  L2 hits and misses from the simulator's own LRU model, write-back of dirty lines. Only the fluid
  link network is replaced: a transfer's rate is fixed when it starts, at a fair share of each
  link and pool among the blocks running at once, assumed to be in lockstep (each as many
  transfers in flight as the replayed block).
- **Order**: a list scheduler without SimPy — per core a dispatcher pushing the program in order
  into per-pipe queues of `scalar.queue_depth` entries (it stalls on a full queue), in-order pipes,
  the TQue and hand-written flags (`Core.set_flag`/`wait_flag`), cross-core flags; a cross-core
  barrier with blocks not replayed passes when reached (identical cores reach it together); a core
  waiting on its own flag that nothing sets is a `DeadlockError`, as in the simulator.
- **Blocks**: the first, a middle and the last block of each launch are replayed (work splits put
  a remainder on the first blocks or on the last; the middle one stands for work that varies
  across blocks); every other block takes the duration of the nearest one below it, and the
  blocks are placed on the usable cores in waves (core mask, block_dim beyond the cores). After
  each launch the L2 sees every tensor the replayed blocks touched as touched in
  full, so a later launch of the call reads from the L2 what the simulator's would.
- **Steady state**: a kernel that loops over tiles with `for t in ctx.tiles(n)` (the shared
  element-wise pipeline, the DSP private path) lets the replay jump: once the scheduler's state at
  the start of a tile (each pipe's instruction in progress and queue, flags, transfers in flight,
  what the dispatcher holds, relative to the current cycle) equals the state 1–4 tiles earlier,
  the remaining periods up to the last tile are counted, not scheduled. An estimate then costs
  about the same for 10³ or 10⁶ tiles. A kernel with plain `range` loops (user kernels, the
  embedding's kernels) is replayed in full: exact order, longer run time.
- A user's own kernel (`opsim.register_operator`, `opsim.asc` or the generator language) gets its
  estimate this way with nothing to write (`tests/opsim/test_replay_estimate.py` holds it to the
  simulator on examples/kernels).

## Closed forms kept ({kept})

Only where measurably better than the replay (the table below has both, `used` marks the one
`mode="estimate"` uses); the reason is written beside `CLOSED_FORM_KEPT` in opsim/estimate.py.

- **binarycrossentropygrad** (DSP, `_dsp_bce_estimate` in opsim/estimate.py, kernels/analytic.py
  pipeline): with several cores on the one DDR link the simulator's cores drift apart; the
  replay's lockstep share overestimates there, the closed form's max-min fair copy rates do not.
  The element-wise pipeline model: vector `ceil(k·N + b)` per instruction plus the pipe head;
  per copy the start-up plus `bytes / rate` with the rate of each of `c` concurrent copies
  `base + shared/c`, reconciled with the link by max-min fair filling; the TQue flag recurrence per
  tile (loads and stores on one DMA pipe, the next tile's loads prefetched before the current
  store), extended by its steady-state period; `LOCKSTEP_WEIGHT = {weight}` weighs the lockstep
  against the spread bound of load/store contention (a calibration against the simulator).
- **embedding_dense_backward** (`estimate` in kernels/ascend/embedding_backward.py, model
  `embedding`): kept for speed, not accuracy — the replay is as close to the simulator (a little
  closer in the table below) but several hundred times slower, because the embedding's kernels do
  not loop with `ctx.tiles` yet and the replay runs every row of the sampled blocks (1–1.5 s a point
  against a few ms): a study of thousands of points would take an hour. Once those loops use
  `ctx.tiles` the closed form can go. Every launch of the call in order (ZerosLike, casts,
  SortIndices and the MergeSortedRuns passes, EmbeddingCount where the product has it, the
  accumulation kernel with its gathers and atomic flushes (on Atlas A2 with the counts and the scale
  inside it), the scale kernel, CastOut), index-dependent work under the pattern timing mode assumes
  (row *i* has index *i* mod numWeights), L2 residency of what an earlier launch wrote. -
  **fused_linear_cross_entropy_loss_grad** (kernels/ascend/flce_estimate.py, model `flce`): the
  mixed launch's phases, each the slowest core's replay of its program with the simulator's costs,
  and an LRU over matmul panels wave by wave (a panel not resident is missed by the first core of
  the wave that loads it; sharing breaks when a chunk's miss-minus-hit time times the cores' load
  rate exceeds `DRIFT_LIMIT = {drift}` L2 sizes, a calibration against the simulator); the
  vector stage's S stores are taken by the write-back L2, HBM carrying the row loads' misses and
  the dirty lines evicted (a batch's S enters the L2 with its last row, as the kernel shows it to
  the L2 model). The generic
  replay samples three blocks in sequence, so the L2 sees the panels in another order than the
  simulator's 24 concurrent cores and misses far more (+20 % on average on this study).

The MSE and BCE closed forms were deleted. On this script's previous run (the same sample of
points) they had a mean |error| of 0.69 % (MSE) and 0.89 % (BCE), maxima 4.75 % and 5.48 %: the
replay is much closer for MSE and the same for BCE on average (its maximum, at 48 cores
saturating HBM, is a little higher; both well within the 3 % mean / 8 % max target), so neither
was measurably better.

## Error on the example studies

Each example study in `examples/studies/` swept in estimate mode; an evenly spaced sample of the
points the operator accepted then run by the simulator in timing mode;
error = (estimate − simulator) / simulator.

{table}

{notes}

Largest errors:

{worst}

Operators registered when this was generated: {operators}. Generated in {wall} s with {workers}
worker processes on a {cpus}-CPU machine by `.venv/bin/python benchmarks/estimate_error.py`.

## Reading it

- The replay is exact where the cores do not contend (one block, or the link not saturated): it
  spends the simulator's own instruction costs in the simulator's own order. Its error comes from
  the link model: with many cores saturating HBM (48 cores, loads and stores together above the
  link's bandwidth) the simulator's cores drift out of lockstep, and the replay's lockstep share
  is an upper bound (up to a few percent high).
- Cube kernels whose blocks share a matrix (a matmul whose cores all read A) are overestimated:
  the replay prices each sampled block as if every block missed the L2 the way it does, where the
  simulator has one core miss and the others hit — +8 % on examples/kernels/matmul_cube_only.py
  at its own size, up to +18 % at 1024 × 1024 × 4096 (`tests/opsim/test_replay_estimate.py` holds
  it to 20 %).
- The tests (`tests/opsim/test_estimate.py`) hold the replay to 10 % on a fixed suite of
  uncontended and contended element-wise points; `tests/opsim/test_replay_estimate.py` holds user
  kernels (examples/kernels, registered with `opsim.register_operator`) to 8 %;
  `tests/opsim/test_estimate_hooks.py` holds the embedding and fused linear cross-entropy closed
  forms to 15 % on small and medium points of every path.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print instead of writing docs/estimate.md")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--save", metavar="JSON", help="also save the measurements (to re-render the page with --load)")
    ap.add_argument("--load", metavar="JSON", help="render the page from the simulator runs saved by --save, "
                                                   "the estimates recomputed (no simulator run)")
    args = ap.parse_args(argv)
    if args.load:
        data = reestimate(json.loads(Path(args.load).read_text(encoding="utf-8")))
    else:
        data = run(args.workers)
        if args.save:
            Path(args.save).write_text(json.dumps(data), encoding="utf-8")
    text = render(data)
    if args.print:
        print(text)
    else:
        out = ROOT / "docs" / "estimate.md"
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
