"""Shared pieces of the fuzz suites: profiles, counters, garbage values, memory snapshots, and
the check that an exception was raised on purpose by opsim (not by numpy, int() or an
attribute lookup).

Profiles: every fuzz test comes in two sizes, ``*_quick`` in the default lane (a few hundred
calls per surface) and ``*_ci`` marked ``slow`` (>= 10,000 calls per surface; the CI lane runs
``-m slow``). Both are derandomized -- the same calls on every run and machine, whatever ran
before them in the process (see _import_every_opsim_module) -- and keep no example database.
The engine's compiled modules (simulator/native.py) have no Python source for Hypothesis to
read constants from, so the compiled and the pure-Python lanes (make test, make test-pure) each
draw their own fixed calls.
``OPSIM_FUZZ_SCALE`` (a number, default 1) multiplies the example counts of both, for a longer
search by hand.

The counters are summed over the session and printed at its end (tests/fuzz/conftest.py), so a
CI log shows how many calls ran and what came back.
"""
from __future__ import annotations

import importlib
import linecache
import math
import os
import pkgutil
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import opsim
from opsim.simulator.memory import PAGE

SCALE = float(os.environ.get("OPSIM_FUZZ_SCALE", "1"))


def _import_every_opsim_module() -> None:
    """Import all of opsim before any example is generated.

    Hypothesis (>= 6.131) draws, now and then, a constant found in the source of the non-test
    modules already imported ("local constants"). Which opsim modules are imported depends on
    what ran before in the process (the acl suite loads the aclnn kernels, for one), so the
    same derandomized test generated different calls alone and after another suite. With
    every module imported up front the pool, and so the calls, no longer depend on order."""
    for name in ("opsim", "opsim.simulator", "opsim.kernels", "opsim.traces", "opsim.devices"):
        pkg = importlib.import_module(name)
        for mod in pkgutil.walk_packages(pkg.__path__, name + "."):
            if not mod.name.endswith(".__main__"):      # __main__ would run the CLI
                importlib.import_module(mod.name)


_import_every_opsim_module()


def fuzz_settings(max_examples: int) -> settings:
    return settings(max_examples=max(1, int(max_examples * SCALE)), derandomize=True, database=None,
                    deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


COUNTS: Counter = Counter()
FINDINGS: list[str] = []

# the source tree of the installed opsim (the layer folders are mapped into the package)
_ROOT = Path(opsim.api.__file__).resolve().parents[1]
_LAYERS = ("simulator", "kernels", "traces", "devices")


def raised_on_purpose(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc`` is a ``raise`` statement in opsim's own code: a
    checked refusal, as opposed to an error from numpy, a builtin such as int(), or a bug."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    path = Path(last.filename)
    if not path.is_absolute() and path.parts[:1] == ("opsim",) and len(path.parts) > 2:
        # a module compiled by mypyc (simulator/native.py) names its source by its package path,
        # and its frames carry no line text: both are the source file's in the repository
        path = _ROOT / Path(*path.parts[1:]) if path.parts[1] in _LAYERS else _ROOT / path
    path = path.resolve()
    if _ROOT not in path.parents or "site-packages" in path.parts or "tests" in path.relative_to(_ROOT).parts:
        return False
    line = last.line or linecache.getline(str(path), last.lineno or 0)
    return "raise" in line


def c_int(value: Any) -> bool:
    """Whether the C boundary takes ``value`` as an integer argument: a Python or numpy integer,
    never a bool. The output models of the suites use it, so a call given np.int64(1) bytes is
    expected to write that one byte (as C would, for any integer type)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def record(kind: str, detail: str) -> None:
    COUNTS[kind] += 1
    if len(FINDINGS) < 50:
        FINDINGS.append(f"{kind}: {detail}")


def _python_text(errors: list[str], before: tuple[int, str | None], call: str) -> None:
    """Count messages of a C-style call that are a caught Python exception ("invalid argument:
    TypeError: ...") rather than a checked refusal naming the parameter."""
    last = errors[-1] if errors else None
    if last is not None and (len(errors), last) != before and ": invalid argument: " in last:
        record("c.python_text_in_messages", f"{call}: {last}")


# -- garbage --------------------------------------------------------------------------------------

class Opaque:
    """An object of no expected type (what a C caller's stray pointer looks like to Python)."""

    def __repr__(self) -> str:
        return "<Opaque>"


FIXED_GARBAGE: tuple[Any, ...] = (
    None, True, False, -1, 0, 1, 2, 3, 31, 33, -2 ** 63, 2 ** 63, 2 ** 64 + 5, 1.5, 0.0, -0.0,
    math.nan, math.inf, -math.inf, "x", "", "0", "mean", b"\x00\x01", [], [1, 2], (3,), {}, {"a": 1},
    1j, np.int64(1), np.int32(-4), np.float32(2.0), np.bool_(True), np.array([1, 2]), np.array(7),
    np.zeros((2, 2), dtype=object), Opaque(), print,
)


def garbage() -> st.SearchStrategy[Any]:
    """Any kind of wrong value: fixed oddities, big and small integers, floats, text."""
    return st.one_of(
        st.sampled_from(FIXED_GARBAGE),
        st.integers(-2 ** 66, 2 ** 66),
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.text(max_size=4),
    )


# -- memory snapshots ---------------------------------------------------------------------------

Snapshot = dict[tuple[str, int], np.ndarray]


def snapshot(dev: Any, skip: Iterable[tuple[str, int, int]] = ()) -> Snapshot:
    """The non-zero 4 KiB pages of a device's global memory ("GM": every region of the address
    space, i.e. HBM/DDR and SMC) and of each DSP core's private memory (by core name), copied.
    ``skip``: (memory, addr, nbytes) ranges left out (a library's own working area)."""
    out: Snapshot = {}
    regions = [("GM", r) for r in dev.space.regions]
    regions += [(core.name, core.memories["PRIVATE"]) for core in dev.cores.get("dsp", [])]
    skips = list(skip)
    for label, region in regions:
        for start, data in region.backed_pieces():
            end = start + data.size
            page = start // PAGE * PAGE
            while page < end:
                lo, hi = max(page, start), min(page + PAGE, end)
                if not any(m == label and a <= lo and hi <= a + n for m, a, n in skips):
                    chunk = data[lo - start:hi - start]
                    if chunk.any():
                        buf = out.setdefault((label, page), np.zeros(PAGE, np.uint8))
                        buf[lo - page:hi - page] = chunk
                page += PAGE
    return out


def changed_outside(before: Snapshot, after: Snapshot, allowed: Iterable[tuple[str, int, int]]) -> int:
    """Bytes that differ between two snapshots outside the ``allowed`` (memory, addr, nbytes)
    ranges (a call's outputs)."""
    allowed = [a for a in allowed if a[2] > 0]
    zero = np.zeros(PAGE, np.uint8)
    changed = 0
    for key in set(before) | set(after):
        a, b = before.get(key, zero), after.get(key, zero)
        diff = np.flatnonzero(a != b)
        if not diff.size:
            continue
        label, page = key
        addrs = diff + page
        keep = np.ones(addrs.size, bool)
        for m, lo, n in allowed:
            if m == label:
                keep &= ~((addrs >= lo) & (addrs < lo + n))
        changed += int(keep.sum())
    return changed


def digest_arrays(values: Iterable[Any]) -> list[tuple]:
    """What a call must not change in the caller's own arrays: shape, dtype and bytes."""
    out = []
    for v in values:
        if isinstance(v, np.ndarray) and not v.dtype.hasobject:
            out.append((v.shape, v.dtype.str, v.tobytes()))
    return out
