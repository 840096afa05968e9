"""The figures of README.md (and of docs/profiling.md): every number in them comes from a run made here.

A figure is a block of the README (or of a doc) between two markers::

    <!-- figure: cli-run -->
    ...generated text...
    <!-- /figure -->

``python -m opsim.docfigs`` (``make docs``) reruns every figure and rewrites the text between its
markers; ``--check`` compares instead and exits 1 on a difference (``tests/docs/test_readme_figures.py``
does the same per figure). Each figure states the operator, shape, dtype, mode and device it ran.
Wall-clock times are the one thing a rerun cannot reproduce: a figure marks them volatile
(``_vol``) and the check accepts any value there.

A figure that takes more than a few seconds is ``slow``: ``make docs`` runs it, the test lane for
slow tests checks it, the default test run does not.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import pathlib
import re
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from typing import Callable, Iterable

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

_V = "\x00"          # brackets a volatile span (a wall-clock time) inside rendered text
_START = re.compile(r"^<!-- figure: ([a-z0-9-]+) -->\n", re.M)
_END = "<!-- /figure -->"


@dataclass(frozen=True)
class Figure:
    """One generated block of a Markdown file."""
    name: str
    render: Callable[[], str]
    slow: bool = False
    path: pathlib.Path = README
    run: bool = True       # a run (states operator, shape, dtype, mode, device) or catalogue data


FIGURES: dict[str, Figure] = {}


def figure(name: str, *, slow: bool = False, path: pathlib.Path = README, run: bool = True):
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        FIGURES[name] = Figure(name, fn, slow, path, run)
        return fn
    return register


def _vol(text: str) -> str:
    """A span a rerun cannot reproduce (wall time): written as is, matched loosely."""
    return f"{_V}{text}{_V}"


def _plain(text: str) -> str:
    return text.replace(_V, "")


def _pattern(text: str) -> re.Pattern[str]:
    parts = text.split(_V)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else r"[^\n]*?" for i, p in enumerate(parts)),
                      re.S)


# ---------------------------------------------------------------------------------------------
# Blocks in a file
# ---------------------------------------------------------------------------------------------

def blocks(text: str) -> dict[str, tuple[int, int]]:
    """name -> (start, end) offsets of the body between a figure's markers."""
    out: dict[str, tuple[int, int]] = {}
    for m in _START.finditer(text):
        end = text.find(_END, m.end())
        if end < 0:
            raise ValueError(f"figure {m.group(1)!r}: no closing {_END}")
        if m.group(1) in out:
            raise ValueError(f"figure {m.group(1)!r} appears twice")
        out[m.group(1)] = (m.end(), end)
    return out


def current(name: str) -> str:
    fig = FIGURES[name]
    text = fig.path.read_text(encoding="utf-8")
    span = blocks(text).get(name)
    if span is None:
        raise KeyError(f"{fig.path.name} has no block <!-- figure: {name} -->")
    return text[span[0]:span[1]]


def fresh(name: str) -> str:
    """The figure's text from a new run (volatile spans still bracketed)."""
    body = FIGURES[name].render().strip("\n")
    return body + "\n"


def matches(name: str, rendered: str | None = None) -> tuple[bool, str, str]:
    """(same?, text in the file, text of a fresh run)."""
    rendered = fresh(name) if rendered is None else rendered
    have = current(name)
    return bool(_pattern(rendered).fullmatch(have)), have, _plain(rendered)


def write(names: Iterable[str]) -> list[str]:
    """Rerun the figures and rewrite their blocks; returns the names whose text changed."""
    changed = []
    for name in names:
        fig = FIGURES[name]
        rendered = fresh(name)
        same, have, new = matches(name, rendered)
        if have == new:
            continue        # (a new wall time is written even though the check would accept the old)
        text = fig.path.read_text(encoding="utf-8")
        start, end = blocks(text)[name]
        fig.path.write_text(text[:start] + new + text[end:], encoding="utf-8")
        changed.append(name)
    return changed


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _capture(argv: list[str]) -> str:
    """stdout of ``opsim <argv>`` run in this process."""
    from opsim.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    if rc:
        raise RuntimeError(f"opsim {' '.join(argv)} exited {rc}:\n{buf.getvalue()}")
    return buf.getvalue()


def _shape(a) -> str:
    return "×".join(str(d) for d in a.shape) if a.shape else "scalar"


def _mega(n: float) -> str:
    return f"{n / 1e6:.2f} M"


# ---------------------------------------------------------------------------------------------
# README figures
# ---------------------------------------------------------------------------------------------

# the demo rows the README shows (a selection, not numbers)
DEMO_ROWS = (("binary_cross_entropy_backward", "atlas-a2", "fp32"),
             ("binarycrossentropygrad", "mt7004", "fp16"),
             ("embedding_dense_backward", "atlas-a2", "fp32"),
             ("embedding_dense_backward", "atlas-training", "fp16"),
             ("fused_linear_cross_entropy_loss_grad", "atlas-a3", "bf16"),
             ("mse_loss_backward", "atlas-a2", "bf16"),
             ("mse_loss_backward", "atlas-inference", "fp32"))


@figure("demo-table", slow=True)
def demo_table() -> str:
    import numpy as np
    from opsim import devices
    from opsim.demo import run_demo
    from opsim.kernels import registry
    # what `opsim demo --no-report` runs (the HTML reports change no number but take minutes)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()) as buf:
        status = run_demo(out_dir=tmp, reports=False)
    lines = buf.getvalue().replace(tmp, "opsim-out").splitlines()
    header, rule = lines[0], lines[1]
    rows = [ln for ln in lines[2:] if ln.strip() and not re.match(r"^\d+ runs,", ln)]
    footer = next(ln for ln in lines if re.match(r"^\d+ runs,", ln))
    counts = re.match(r"^(\d+) runs, (\d+) failed", footer)
    assert counts is not None                # the demo's footer line says both
    n_runs, n_failed = map(int, counts.groups())
    if status or n_failed:
        raise RuntimeError("the demo has failing rows:\n" + "\n".join(r for r in rows if "FAIL" in r))
    shown = [r for r in rows if tuple(r.split()[:3]) in DEMO_ROWS]
    assert len(shown) == len(DEMO_ROWS), shown
    # operands of the rows shown: each operator's example recipe (seed 0)
    recipe = []
    for op_name, dev, dt in DEMO_ROWS:
        op = registry.get(op_name)
        kwargs = op.example(np.random.default_rng(0), devices.load(dev), dt)
        arrays = [f"{k} {_shape(v)}" for k, v in kwargs.items()
                  if k in (*op.inputs, *op.optional) and hasattr(v, "shape")]
        recipe.append(f"`{op_name}` on {dev}, {dt}: {', '.join(arrays)}")
    return "\n".join([
        f"`make demo` prints one row per (operator, device, dtype) run — {n_runs} runs, each checked "
        "against the",
        "operator's golden — and writes a Chrome/Perfetto trace and an HTML report per run, plus an "
        "index",
        "page, into `./opsim-out/`:",
        "",
        "```",
        header, rule, *shown, "...",
        re.sub(r"(failed, )([\d.]+)( s;)", lambda m: m.group(1) + _vol(m.group(2)) + m.group(3), footer),
        "```",
        "",
        *textwrap.wrap("The rows and the run time above are those of `opsim demo --no-report` (`make demo` "
                       "also writes the HTML reports, which takes longer). All rows run in `full` mode "
                       "(numbers and timing) on the operands of each operator's example recipe (seed 0). "
                       "`GM link GB/s` is the achieved rate on the device's GM link, HBM or DDR as the "
                       "row names it (L2 hits and the stores a write-back L2 takes are on the L2 link: "
                       "`opsim run` shows each link). The rows shown:", width=100),
        *[f"- {r}" for r in recipe],
    ])


def _calibration():
    """benchmarks/calibrate.py as a module (the script that writes docs/calibration.md)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("calibrate", ROOT / "benchmarks" / "calibrate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@figure("dma-calibration")
def dma_calibration() -> str:
    import opsim
    cal = _calibration()
    rows = cal.table()
    mean = sum(abs(r[4]) for r in rows) / len(rows)
    l2 = opsim.device_spec("atlas-a2").l2
    assert l2 is not None                    # the A2 file describes its L2
    line = l2.chunk
    return "\n".join(textwrap.wrap(
        "- **DMA** is a transfer in a fluid network. A GM→UB load of one core gets a base rate `a` plus "
        "an equal share of a pool `b` among the loads in flight (`a + b/n`, the published MTE2 fit), "
        "capped by the shared HBM link (`ddr_rate × AI cores × clock`); rates are recomputed whenever a "
        "transfer starts or ends; each transfer pays a start-up latency; a core's first copy of a launch "
        "pays the pipe head (once, however many blocks the core runs; MTE2's grows with the blocks "
        "running at once, and takes its larger published form with the core's first load of 25000 B "
        "or more: A-10). Stores (MTE3) likewise with their own fit. The L2 is an LRU over "
        f"{line} B lines: hits are served at the L2 rate, writes allocate. The simulated load time "
        f"reproduces the published formula to {100 * mean:.2f}% mean error over {len(rows)} cells "
        f"(fp32 copies in timing mode on atlas-a2, block_dim {min(cal.BLOCK_DIMS)}–{max(cal.BLOCK_DIMS)}, "
        f"{min(cal.SIZES_KIB)}–{max(cal.SIZES_KIB)} KiB; `docs/calibration.md`).",
        width=100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False))


WORKED = '''import numpy as np, ml_dtypes, opsim

rng = np.random.default_rng(0)
x, y, g = (rng.standard_normal((64, 4096)).astype(ml_dtypes.bfloat16) for _ in range(3))
res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y, reduction="mean")
'''


@figure("worked-example")
def worked_example() -> str:
    import numpy as np
    ns: dict = {}
    exec(compile(WORKED, "<README worked example>", "exec"), ns)   # the code shown, run as shown
    res, opsim = ns["res"], ns["opsim"]
    from opsim.kernels import registry
    op = registry.get("mse_loss_backward")
    gold = op.golden({"grad_output": ns["g"], "self": ns["x"], "target": ns["y"]},
                     {**op.attrs, "reduction": "mean"})["out"]
    out = res.outputs["out"]
    bitwise = out.dtype == gold.dtype and np.array_equal(out.view(np.uint16), gold.view(np.uint16))
    verdict = "bitwise what the device returns" if bitwise else "within tolerance of the golden"
    try:
        opsim.run("mse_loss_backward", device="atlas-training", grad_output=ns["g"], self=ns["x"],
                  target=ns["y"])
        raise RuntimeError("the bf16 call on atlas-training was expected to be rejected")
    except opsim.OpError as exc:
        err = f"opsim.OpError: {exc}"
    err_lines = textwrap.wrap(err, width=92)
    err_text = "# " + "\n#                ".join(err_lines)
    s = res.stats
    return "\n".join([
        "```python",
        WORKED.rstrip("\n"),
        "",
        f'res.outputs["out"]        # {out.dtype.name} array, {verdict}',
        f"res.cycles, res.time_us   # {res.cycles} cycles, {res.time_us:.3f} us",
        f'res.stats["block_dim"]    # {s["block_dim"]}',
        f'res.stats["bound"]        # {s["bound"]!r}',
        'res.trace.to_chrome_json("mse.json")   # open in https://ui.perfetto.dev or chrome://tracing',
        "",
        'opsim.run("mse_loss_backward", device="atlas-training", grad_output=g, self=x, target=y)',
        err_text,
        "```",
        "",
        f"(64×4096 bf16, reduction mean, `{res.mode}` mode, atlas-a2; regenerated by `make docs`.)",
    ])


CLI_ARGS = ["run", "mse_loss_backward", "--device", "atlas-a2", "--shape", "64x4096", "--dtype", "bf16",
            "--reduction", "mean"]


@functools.lru_cache(maxsize=1)
def _cli_run_output() -> str:
    """stdout of the README's `opsim run` command (shared by the figures that quote it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        return _capture(CLI_ARGS + ["--trace", path]).replace(path, "out.json")


@figure("cli-run")
def cli_run() -> str:
    out = _cli_run_output()
    return "\n".join(["```", "$ opsim " + " ".join(CLI_ARGS + ["--trace", "out.json"]), out.rstrip("\n"), "```"])


# ---------------------------------------------------------------------------------------------
# docs/profiling.md figures
# ---------------------------------------------------------------------------------------------

PROFILING = ROOT / "docs" / "profiling.md"
CLI_RUN_CAPTION = "(MSE backward, 64×4096 bf16, mean, atlas-a2, full mode: the `opsim run` of the README.)"


@figure("profiling-links", path=PROFILING)
def profiling_links() -> str:
    lines = [ln for ln in _cli_run_output().splitlines()
             if ln.startswith("bytes moved") or re.match(r"^\S+ link ", ln)]
    return "\n".join(["```", *lines, "```", "", CLI_RUN_CAPTION])


@figure("profiling-bound", path=PROFILING)
def profiling_bound() -> str:
    bound = next(ln for ln in _cli_run_output().splitlines() if ln.startswith("bound "))
    text = re.sub(r"^bound\s+", "", bound)
    return "\n".join(["```", *textwrap.wrap(text, width=95, initial_indent="bound  ", subsequent_indent="       ",
                                             break_long_words=False, break_on_hyphens=False),
                       "```", "", CLI_RUN_CAPTION])


@figure("profiling-flce-links", slow=True, path=PROFILING)
def profiling_flce_links() -> str:
    import opsim
    from opsim.kernels.ascend import flce_grad as F
    bt = h = 4096
    v = 32000
    TS = opsim.TensorSpec
    res = opsim.run(F.NAME, device="atlas-a2", mode="timing", trace="off",
                    grad=TS((bt,), "fp32"), input=TS((bt, h), "bf16"), weight=TS((v, h), "bf16"),
                    target_mask=TS((bt,), "bool"), masked_target=TS((bt,), "int64"),
                    logits_max=TS((bt,), "fp32"), sum_exp_logits=TS((bt,), "fp32"))   # memory-saving
    links, by = res.stats["links"], res.stats["link_bytes"]
    gm = res.stats["gm_link"]
    reads = sum(n for k, n in by.items() if k.endswith(" read"))
    hits = by.get("L2 read", 0) / reads

    def rate(name: str) -> str:
        link = links[name]
        return f"{name} {link['achieved_GBps']:.0f} GB/s ({100 * link['achieved_GBps'] / link['peak_GBps']:.0f}%)"
    text = (f"Before this split, the fused linear cross-entropy gradient at BT {bt} / H {h} / V {v} "
            "(timing mode, memory-saving, bf16, atlas-a2) printed \"GM bandwidth 3018 GB/s achieved of 1382.4 "
            f"GB/s peak (218%)\": {100 * hits:.0f}% of its reads are L2 hits. Counted per link it is "
            f"{rate(gm)} and {rate('L2')}.")
    return "\n".join(textwrap.wrap(text, width=100, break_long_words=False, break_on_hyphens=False))


STUDY = "examples/studies/elementwise_tiling_a2_a3.toml"


def _study_toml() -> str:
    """The study file without its comment header and plot tables."""
    keep, skip = [], False
    for line in (ROOT / STUDY).read_text(encoding="utf-8").splitlines():
        if line.startswith("[[plot]]"):
            skip = True
        elif line.startswith("["):
            skip = False
        if skip or line.startswith("#"):
            continue
        keep.append(line)
    return "\n".join(keep).strip("\n")


@figure("study", slow=True)
def study() -> str:
    import sqlite3
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        out = _capture(["sweep", str(ROOT / STUDY), "--confirm-top", "3", "--plot", "plots/"])
        db = next(pathlib.Path(tmp).glob("*.sqlite"))
        conn = sqlite3.connect(str(db))
        failed = conn.execute("select count(*) from points where status != 'ok'").fetchone()[0]
        sample = conn.execute("select error_code, error from points where error_code = 561002 "
                              "order by idx limit 1").fetchone()
        conn.close()
        out = out.replace(tmp + os.sep, "").replace(tmp, ".")
    if sample is None:
        raise RuntimeError("the study recorded no tiling refusal (561002)")
    sample_text = f"{sample[0]}: " + re.sub(r"^\w+Error: ", "", sample[1])
    out = re.sub(r" in [\d.]+ s", lambda m: " in " + _vol(m.group(0)[4:]), out)
    return "\n".join([
        "```toml", _study_toml(), "```", "",
        "```", f"$ opsim sweep {STUDY} --confirm-top 3 --plot plots/", out.rstrip("\n"), "```", "",
        *textwrap.wrap(
            f'The {failed} "failed" points are tilings that do not fit the UB: each row records the '
            f"refusal (`{sample_text}`). `estimate` mode replays the kernel program with the simulator's "
            "own instruction costs, without the event loop (its error against the simulator is in "
            "`docs/estimate.md`); `--confirm-top K` runs "
            "the simulator on the best K. Rows are committed point by point, so a sweep killed at any "
            "moment and rerun with `--resume` ends with exactly one row per point. Points run in local "
            "worker processes, or on a dask.distributed cluster with `--executor dask`.",
            width=100, break_long_words=False, break_on_hyphens=False),
    ])


@figure("known-limits-flce", slow=True)
def known_limits_flce() -> str:
    import opsim
    from opsim.kernels.ascend import flce_grad as F
    spec = opsim.device_spec("atlas-a2")
    bt = h = 4096
    TS = opsim.TensorSpec

    def operands(v: int) -> dict:
        return {"grad": TS((bt,), "fp32"), "input": TS((bt, h), "bf16"), "weight": TS((v, h), "bf16"),
                "target_mask": TS((bt,), "bool"), "masked_target": TS((bt,), "int64"),
                "softmax": TS((bt, v), "fp32")}          # softmax given: high-performance mode

    def run(v: int, **kw):
        t0 = time.perf_counter()
        res = opsim.run(F.NAME, device="atlas-a2", mode="timing", trace="off", **operands(v), **kw)
        return res, time.perf_counter() - t0

    small, _ = run(8192)
    big, t_big = run(32000)
    deep, _ = run(32000, device_overrides={"scalar.queue_depth": 32})
    exact, t_exact = run(32000, tiling={"coarsen": 1})
    assert spec.cube is not None and spec.l2 is not None   # the A2 file describes both
    peak = 2 * spec.cube.macs_per_cycle["bf16"] * spec.cores.aic * spec.clock_hz

    def tflops(res, v):
        return 2.0 * bt * h * v * 2 / (res.cycles / spec.clock_hz) / 1e12

    bm, bn, bk = F.BASE_M, F.BASE_N, F.BASE_K
    need = (bm + bn) * bk * 2 / (bm * bn * bk / spec.cube.macs_per_cycle["bf16"])   # bf16 panels
    l2_mib = spec.l2.size / 2**20
    sw_mib = bt * 8192 * 2 / 2**20            # S (bf16) and W at V 8192: 64 MiB each
    panel_a = bm * 32000 * 2 / 1e6
    panel_b = bn * 32000 * 2 / 1e6
    hit = big.stats["l2_hit_rate"]
    b_s, b_b = small.stats["pipe_busy"], big.stats["pipe_busy"]
    starved = [r.stats["issue_starved"].get("MTE2", 0) / r.cycles for r in (small, big)]
    depth = spec.scalar.queue_depth
    off = (big.cycles - exact.cycles) / exact.cycles
    conditions = ("bf16, high-performance mode (softmax given), timing mode, atlas-a2, "
                  f"BT {bt} / H {h}")
    bullets = [
        f"**Fused linear cross-entropy: cube-bound while its panels fit the L2.** {bm}×{bn}×{bk} base "
        f"tiles stream their K panels, which needs ~{need:.0f} B/cycle per cube core against "
        f"{spec.rates.l2_read:g} B/cycle for L2 hits and {spec.rates.gm_read:g} B/cycle for misses. "
        f"Runs: {conditions}. At V 8192 (S and W, {sw_mib:.0f} MiB each, fit the {l2_mib:.0f} MiB L2) "
        f"the cube is the bound (CUBE {_mega(b_s['CUBE'])} vs MTE2 {_mega(b_s['MTE2'])} busy cycles). "
        f"The 910B-class partition (V 32000) is not: its input_grad panels ({panel_a:.0f}–{panel_b:.0f} "
        f"MB each, K = 32000) miss the L2 for {100 * (1 - hit):.1f}% of the bytes (hit rate {hit:.4f}), "
        f"and MTE2 {'edges out' if b_b['MTE2'] > b_b['CUBE'] else 'stays below'} CUBE "
        f"({_mega(b_b['MTE2'])} vs {_mega(b_b['CUBE'])} busy cycles, {_mega(big.cycles)} cycles, "
        f"{tflops(big, 32000):.0f} TFLOP/s = {100 * tflops(big, 32000) * 1e12 / peak:.0f}% of peak). "
        "The L2 line size and policy are assumptions.",
        f"**Instruction queue depth is an assumption** (`scalar.queue_depth` = {depth} entries per pipe, "
        "flags included). In-order issue then holds back each L1 chunk's MTE2 copy behind the previous "
        "chunk's MTE1/CUBE instructions, the effect the vendor's MTE2-preload note describes: in the "
        f"FLCE runs above MTE2 sits idle for {100 * min(starved):.0f}–{100 * max(starved):.0f}% of the "
        "run with its copy held back (`stats[\"issue_starved\"]`, named in `bound_reason`); at depth 32 "
        f"the 910B-class partition runs in {_mega(deep.cycles)} cycles ({tflops(deep, 32000):.0f} "
        "TFLOP/s). Try it with `device_overrides={\"scalar.queue_depth\": 32}`.",
        f"**Coarse timing.** Above {F.FINE_CHUNK_BUDGET} L1 chunks, timing mode issues one set of cube "
        "instructions per several chunks, with the same L0 steps and flags as one exact chunk, and "
        f"samples the L2 by address (one line in {F.COARSE_L2_PERIOD}×coarsen, hashed); it coarsens "
        "no further than one coarse chunk of every cube core fits the L2 together (coarser, the "
        "cores sharing a panel drift apart and miss lines the exact schedule finds in the L2). A "
        "coarse chunk waits for its load as long as its exact chunks together, and at a tile "
        "boundary the previous tile's Fixpipe hides all of that wait where the exact schedule hides "
        "one chunk's, so where the cube waits on its loads a coarse run is faster than the exact "
        "schedule (not corrected: a hold for it overshot at coarsen 8 and more, where the first "
        f"coarse load of a phase is late instead). On the 910B-class case (coarsen {big.tiling.coarsen}) "
        f"the coarse run is {100 * abs(off):.1f}% {'faster' if off < 0 else 'slower'} than the exact "
        "schedule",
    ]
    out = []
    for b in bullets:
        out.extend(textwrap.wrap(b, width=100, initial_indent="- ", subsequent_indent="  ",
                                 break_long_words=False, break_on_hyphens=False))
    # the wall times on a line of their own, so their width never moves a line break
    out.append(f"  ({big.cycles:,} vs {exact.cycles:,} cycles; {_vol(f'{t_big:.1f}')} s vs "
               f"{_vol(f'{t_exact:.0f}')} s wall).")
    return "\n".join(out)


def _idle_pipe_work(trace, core: str, busy: str, idle: str) -> int:
    """Cycles ``core``'s ``busy`` pipe works while its ``idle`` pipe does nothing (from the slices)."""
    def union(thread: str) -> list[tuple[int, int]]:
        out: list[list[int]] = []
        for a, b in sorted((s.start, s.end) for s in trace.slices(core, thread)):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return [(a, b) for a, b in out]
    other = union(idle)
    return sum(e - s - sum(max(0, min(e, oe) - max(s, os_)) for os_, oe in other) for s, e in union(busy))


@figure("known-limits-dsp-scaling")
def known_limits_dsp_scaling() -> str:
    import opsim
    from opsim.kernels import dsp
    TS = opsim.TensorSpec
    n = 65536

    def run(device: str, dtype: str, cores: int, tiling: dict | None = None):
        return opsim.run(dsp.NAME, device=device, mode="timing", trace="instruction", tiling=tiling,
                         input_x=TS((n,), dtype), input_y=TS((n,), dtype), weight=TS((n,), dtype),
                         dloss=TS((1,), dtype), reduction=1, core_mask=(1 << cores) - 1)

    def ddr_idle(res) -> int:
        """Cycles after the launch with nothing on the DDR link (its rate counter at 0)."""
        pts = sorted((t, v) for proc, series, t, v in res.trace.counters()
                     if proc == "memory" and series.startswith("DDR"))
        ends = [t for t, _ in pts[1:]] + [res.cycles]
        return sum(max(0, e - max(t, launch)) for (t, v), e in zip(pts, ends) if v == 0)

    def exposed(res) -> int:
        """Compute cycles with the DMA pipe idle, on the core that finishes last."""
        last = max(res.stats["per_core"], key=lambda c: max(s.end for s in res.trace.slices(c)))
        return _idle_pipe_work(res.trace, last, "VECTOR", "DMA")

    spec = opsim.device_spec("ft78ne")
    launch = spec.launch.overhead
    assert spec.dma is not None          # required of every DSP spec (devices/spec.py)
    startup = spec.dma.startup
    one_tile = dsp.plan_call(spec, storage="shared", dtype="fp32", total=n, reduction=1, weight_defined=True,
                             core_mask=1, overrides={"buffer_num": 1}).tile_length
    five, six = run("ft78ne", "fp32", 5), run("ft78ne", "fp32", 6)
    t5, t6 = five.tiling, six.tiling
    half = -(-t6.chunk // 2 // dsp.ALIGN_ELEMENTS) * dsp.ALIGN_ELEMENTS
    forced = run("ft78ne", "fp32", 6, {"buffer_num": 2, "tile_length": half})
    dma = {k: max(v.get("DMA", 0) for v in r.stats["per_core"].values()) for k, r in ((5, five), (6, six))}
    ddr = {k: r.stats["links"]["DDR"] for k, r in ((5, five), (6, six))}
    if any(d["max_rate_GBps"] < d["peak_GBps"] * (1 - 1e-9) for d in ddr.values()):
        raise RuntimeError("the DDR link no longer reaches its peak at 5 and 6 cores: rewrite this figure")
    even = n / 6
    mt3, mt4 = run("mt7004", "fp16", 3), run("mt7004", "fp16", 4)
    big = [opsim.run(dsp.NAME, device="ft78ne", mode="timing", trace="off", input_x=TS((1 << 20,), "fp32"),
                     input_y=TS((1 << 20,), "fp32"), weight=TS((1 << 20,), "fp32"), dloss=TS((1,), "fp32"),
                     reduction=1, core_mask=(1 << k) - 1) for k in range(1, spec.cores.dsp + 1)]
    falls = all(b.cycles < a.cycles for a, b in zip(big, big[1:]))
    big_tiles = min(-(-r.tiling.chunk // r.tiling.tile_length) for r in big)
    last6 = t6.total - (t6.active_threads - 1) * t6.chunk

    def pct(a: int, b: int) -> str:
        return f"{100 * (b - a) / a:+.1f}%"
    text = (
        f"**A DSP `_s` call can get slower with one more core.** binarycrossentropygrad, fp32, {n} "
        f"elements, mean, with weight, timing mode, ft78ne: 5 cores {five.cycles:,} cycles, 6 cores "
        f"{six.cycles:,} ({pct(five.cycles, six.cycles)}). The library's plan (`kernels/dsp.py` `plan_call`, "
        "an assumption: the real library is closed) runs a core's chunk as one single-buffered tile when "
        f"it fits the working area (here up to {one_tile} elements) and double-buffers two or more tiles "
        f"otherwise. At 5 cores a {t5.chunk}-element chunk is {-(-t5.chunk // t5.tile_length)} tiles of "
        f"up to {t5.tile_length}: the next tile loads while the last one computes and the DMA pipe never "
        f"idles (busy {dma[5]:,} of the {five.cycles - launch:,} cycles after the launch; compute with "
        f"the DMA idle: {exposed(five):,} cycles). At 6 cores the {t6.chunk}-element chunk is one tile: "
        "load x, y and w, compute, store, one after the other, and the cores run in lockstep, so the DDR "
        f"link carries nothing while they compute ({exposed(six):,} cycles with the DMA idle; DMA busy "
        f"{dma[6]:,}). The DDR link idles {ddr_idle(five):,} cycles after the launch at 5 cores ("
        f"{startup:,}-cycle DMA start-ups, 4 transfers a tile, mostly in lockstep) and {ddr_idle(six):,} at "
        f"6 (start-ups and compute). Not the cause: the split (the largest chunk is "
        f"{t6.chunk - even:.0f} elements above an even share, the last core takes {last6}), the DDR "
        "link (it reaches its "
        f"{ddr[6]['peak_GBps']:g} GB/s peak in both runs, shared fairly by the cores loading; "
        f"{ddr[5]['bytes']:,} vs {ddr[6]['bytes']:,} B, the 4 B of dloss[0] each core reads), the mean "
        "(each core reads dloss[0] itself: no cross-core step). Two double-buffered tiles per core, "
        f"`tiling={{\"buffer_num\": 2, \"tile_length\": {half}}}`, run 6 cores in {forced.cycles:,} cycles. "
        f"mt7004 fp16 does the same from 3 to 4 cores ({mt3.cycles:,} to {mt4.cycles:,} cycles, "
        f"{pct(mt3.cycles, mt4.cycles)}; {exposed(mt4):,} cycles of compute with the DMA idle). At "
        f"2^20 elements every chunk on ft78ne takes at least {big_tiles} double-buffered tiles and the "
        f"time {'falls with every core' if falls else 'does not fall with every core'} "
        f"({big[0].cycles:,} to {big[-1].cycles:,} cycles from 1 to {len(big)} cores).")
    return "\n".join(textwrap.wrap(text, width=100, initial_indent="- ", subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False))


@figure("known-limits-l2-writeback", slow=True)
def known_limits_l2_writeback() -> str:
    import opsim
    n, sizes = 1 << 23, (2, 4, 8, 16, 24, 32, 48, 64, 128)
    spec = opsim.TensorSpec((n,), "fp32")
    runs = {mib: opsim.run("mse_loss_backward", device="atlas-a2", mode="timing", trace="off",
                           reduction="none", device_overrides={"l2.size": mib << 20},
                           grad_output=spec, self=spec, target=spec) for mib in sizes}
    cyc = {m: r.cycles for m, r in runs.items()}
    wb = {m: r.stats["link_bytes"].get("HBM write", 0) for m, r in runs.items()}
    # the worst inversion: a larger L2 slower than a smaller one
    rise, small, large = max((cyc[b] / cyc[a] - 1, a, b) for a in sizes for b in sizes if b > a)
    assert all(wb[b] <= wb[a] for a, b in zip(sizes, sizes[1:]))     # the bytes are monotone
    listed = ", ".join(f"{m} MiB {cyc[m]:,} ({wb[m] / 1e6:.1f} MB)" for m in sizes)
    text = (
        "**L2 what-ifs of write-heavy streaming kernels are not monotone in the L2 size.** Runs: MSE "
        f"backward, fp32, shape ({n},), reduction none, timing mode, atlas-a2 with "
        f"`l2.size` overridden; cycles (bytes written back to HBM): {listed}. {large} MiB runs "
        f"{100 * rise:.1f}% slower than {small} MiB though it writes back no more. The bytes follow "
        "the L2 size (an LRU cache holds what a smaller one holds); the time does not, because of "
        "when the write-backs fall. A dirty line is written to GM before new data enters its place "
        "(docs/sources.md#l2-cache-mode), as an HBM transfer of the evicting access, shared "
        "max-min fairly with the loads (simulator/device.py `_with_writeback`). At the L2 sizes that "
        "line up with the bytes a round of tiles touches, the cores (in lockstep on equal slices, "
        "over an exact LRU) evict their tiles' dirty lines together and those write-backs take up "
        "to half of HBM from the loads, while at other moments HBM has bandwidth spare that the "
        "loads, held to their DMA rate, cannot use. Letting the evicting access go on without "
        "waiting changes nothing (the write-backs still start together). A memory controller that "
        "buffers writes and serves reads first (docs/sources.md#l2-writeback-path), a set-associative "
        "L2 and cores that drift apart would spread them; none is modelled. Read such what-ifs with "
        "a few % of noise, or compare `link_bytes[\"HBM write\"]`."
    )
    return "\n".join(textwrap.wrap(text, width=100, initial_indent="- ", subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False))


# labels of the SoC column (names, not numbers)
SOC_LABEL = {"atlas-training": "Ascend 910", "atlas-inference": "310P3", "atlas-a2": "910B2",
             "atlas-a2-910b1": "910B1", "atlas-a2-910b3": "910B3", "atlas-a2-910b4": "910B4",
             "atlas-a3": "910_9391, one die", "atlas-200i-500-a2": "310B1",
             "ft78ne": "DSP (treated as C66x-like)", "mt7004": "DSP (FT-Matrix-like)"}


def _ids(text: str) -> list[str]:
    return re.findall(r"(?<![\w-])A-D?\d+(?!\w)", text)


def _tag(prov) -> str:
    """How solid a value is, from its provenance: published, derived, press, assumption A-n."""
    if prov.kind == "assumption":
        ids = sorted(set(_ids(prov.text)))
        return "assumption" + (f" {ids[0]}" if len(ids) == 1 else "")
    text = prov.text.lower()
    for word in ("press", "derived"):
        if word in text:
            return word
    return "published"


def _rate(bps: float) -> str:
    return f"{bps / 1e12:.3g} TB/s" if bps >= 1e12 else f"{bps / 1e9:.3g} GB/s"


@figure("device-catalogue", run=False)
def device_catalogue() -> str:
    from opsim import devices
    lines = ["| device | SoC | cores | clock | UB | GM | source of the timing constants |",
             "|---|---|---|---|---|---|---|"]
    # one row per catalogue device (a variant's cores, clock and link differ from its family's)
    shipped = devices.catalogue()
    for name in [n for n in SOC_LABEL if n in shipped] + [n for n in shipped if n not in SOC_LABEL]:
        spec = devices.load(name)
        prov = spec.provenance
        label = name
        c = spec.cores
        cores = {"split": f"{c.aic} AIC + {c.aiv} AIV", "coupled": f"{c.aic} coupled AI cores",
                 "dsp": f"{c.dsp} DSP cores"}[c.architecture]
        clock = f"{spec.clock_hz / 1e6:g} MHz"
        if prov["clock_hz"].kind == "assumption":
            clock += f" ({_tag(prov['clock_hz'])})"
        ub = (f"{spec.ub.size // 1024} KiB" if spec.ub is not None
              else f"private {spec.private.capacity // 1024} KiB" if spec.private is not None else "none")
        gm = f"{spec.gm.kind} {_rate(spec.gm.bandwidth)} ({_tag(prov['gm.bandwidth'])})"
        if c.architecture == "dsp":
            keys = [k for k in prov if k.split(".")[0] in ("dma", "launch")]   # the time constants
            ids = sorted({i for k in keys for i in _ids(prov[k].text)}, key=lambda s: (len(s), s))
            timing = "assumptions " + ", ".join(ids)
        elif prov["mte2.base"].kind == "source":
            timing = "GE calibrated model (published)"
        else:
            timing = "910B model scaled by GM rate (assumption " + ", ".join(
                sorted(set(_ids(prov["mte2.base"].text)))) + ")"
        lines.append(f"| {label} | {SOC_LABEL.get(name, spec.soc)} | {cores} | {clock} | {ub} | {gm} | {timing} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opsim.docfigs", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="figures to regenerate (default: all)")
    ap.add_argument("--check", action="store_true", help="compare with a fresh run instead of writing")
    ap.add_argument("--fast", action="store_true", help="skip the slow figures")
    ap.add_argument("--list", action="store_true", help="list the figures and where they live")
    args = ap.parse_args(argv)
    names = args.names or [n for n, f in FIGURES.items() if not (args.fast and f.slow)]
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        ap.error(f"unknown figure(s) {unknown}; known: {', '.join(FIGURES)}")
    if args.list:
        for n in names:
            f = FIGURES[n]
            print(f"{n:22s} {f.path.relative_to(ROOT)}{'  (slow)' if f.slow else ''}")
        return 0
    status = 0
    for n in names:
        t0 = time.perf_counter()
        if args.check:
            ok, have, new = matches(n)
            print(f"{n}: {'same' if ok else 'DIFFERS'} ({time.perf_counter() - t0:.1f} s)")
            if not ok:
                import difflib
                sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), new.splitlines(True),
                                                           "in the file", "fresh run"))
                status = 1
        else:
            changed = write([n])
            print(f"{n}: {'rewritten' if changed else 'unchanged'} ({time.perf_counter() - t0:.1f} s)")
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
