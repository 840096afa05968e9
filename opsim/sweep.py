"""Capacity and tiling studies: the cross product of a study's axes, one SQLite row per point.

A study is a TOML file (or the same structure as a dict)::

    [study]
    name = "elementwise-tiling"
    mode = "estimate"                 # estimate | timing | full (also allowed as an axis)

    [axes]
    device = ["atlas-a2", "atlas-a3"]
    operator = ["mse_loss_backward"]
    shape = [[1048576], [4096, 1024]] # every required input gets this shape (optional operands
                                      # are left out), or a table per operand:
                                      # shape = [{grad = [4096, 512], indices = [4096]}]
    dtype = ["fp32", "fp16"]          # every shaped operand, or a table per operand
    tiling.tile_length = [2048, 4096] # tiling overrides (block_dim, tile_length, buffer_num, ...)
    override."ub.size" = [131072, 262144]   # what-if device fields by dotted key
    attr.reduction = ["mean"]         # operator attributes

    [operands.indices]                # fixed per-operand settings (optional)
    dtype = "int32"

    [[plot]]                          # optional; `--plot DIR` draws these
    kind = "heatmap"                  # or "lines"
    x = "tiling.tile_length"
    y = "tiling.block_dim"
    value = "time_us"                 # a numeric result column (PLOT_VALUES); series = an axis (lines)

Every point is identified by a stable hash of its canonical parameters; its row is committed
as soon as it finishes, so a sweep killed at any moment and resumed (``resume=True``) ends with
exactly one row per point. Points run in local worker processes (``concurrent.futures``) or on
a dask.distributed cluster; the database is only ever written by the calling process. A point
that fails is recorded with its status code and message, and the sweep goes on; so is a point
whose local worker process dies (``WorkerDied``: the points of the batches it took down are run
again, one at a time, to find it). With one worker (``workers=1``) or ``executor="serial"`` the
points run in the calling process, so a point that kills its process ends the sweep there; the
rows already committed stay, and ``resume=True`` goes on after them.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import re
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, cast

from opsim.devices.spec import SpecError, read_toml
from opsim.study_files import (database_path, check_existing as _check_existing, device_file_digests, study_hash,
                               watch_parent)
from opsim.limits import HostMemoryError, host_memory_budget, max_study_points

__all__ = ["Study", "StudyError", "SweepResult", "load_study", "sweep", "run_point", "point_id"]

MODES = ("estimate", "timing", "full")
AXIS_PREFIXES = ("tiling", "override", "attr")
PLAIN_AXES = ("device", "operator", "shape", "dtype", "mode")
UTIL_PIPES = ("MTE2", "MTE1", "VECTOR", "MTE3", "CUBE", "FIXP", "DMA", "SCALAR")
SCHEMA_VERSION = 1
MAX_WORKERS = 1024   # local worker processes one sweep may start (a typo must not fork-bomb the host)


# how a message names an option of a sweep: sweep()'s keyword argument, `opsim sweep`'s flag
OPTION_SPELLINGS: dict[str, tuple[str, str]] = {
    "resume": ("resume=True", "--resume"),
    "overwrite": ("overwrite=True", "--overwrite"),
    "db": ("database=PATH", "--db PATH"),
    "executor_dask": ("executor='dask'", "--executor dask"),
    "confirm_top": ("confirm_top=", "--confirm-top "),   # followed by the value given
    "mode": ("mode=", "--mode "),                         # followed by the value given
}


def _spell(template: str, which: int) -> str:
    """``template`` with each ``{option}`` of :data:`OPTION_SPELLINGS` spelt for an entry point
    (0: Python, 1: command line); other braces (a path's) stay as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: OPTION_SPELLINGS[m[1]][which] if m[1] in OPTION_SPELLINGS else m[0],
                  template)


class StudyError(ValueError):
    """A study file is malformed or a sweep cannot start; the message names the file, the key and
    the line, or what to give instead.

    A message that names options of the sweep (:meth:`naming_options`) reads as the Python call
    spells them (``resume=True``); :meth:`cli_message` spells them as ``opsim sweep``'s flags."""

    template: str | None = None

    @classmethod
    def naming_options(cls, template: str) -> StudyError:
        """The error whose message is ``template`` with ``{resume}``, ``{overwrite}``, ``{db}``,
        ``{executor_dask}`` spelt as sweep()'s keyword arguments."""
        exc = cls(_spell(template, 0))
        exc.template = template
        return exc

    def cli_message(self) -> str:
        """The message as the command line's user reads it: the options as flags."""
        return _spell(self.template, 1) if self.template is not None else str(self)


# ---------------------------------------------------------------------------------------------
# study files
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Study:
    """A validated study: its axes in file order and the fixed settings of every point."""

    name: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]     # (axis key, values) in file order
    mode: str = "estimate"
    seed: int = 0
    operands: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    plots: tuple[Mapping[str, Any], ...] = ()
    database: str | None = None
    source: str = "<dict>"
    description: str = ""

    @property
    def size(self) -> int:
        return math.prod(len(v) for _, v in self.axes)

    def axis_keys(self) -> list[str]:
        return [k for k, _ in self.axes]

    def points(self) -> Iterator[dict[str, Any]]:
        """The cross product, in file order (the last axis varies fastest)."""
        keys = self.axis_keys()
        for idx, combo in enumerate(itertools.product(*(v for _, v in self.axes))):
            yield {"index": idx, "axes": dict(zip(keys, combo))}


_SECTIONS = {"study", "axes", "operands", "plot"}
_PLOT_KEYS = ("kind", "x", "y", "series", "value")
_STUDY_KEYS = {"name", "mode", "seed", "database", "description"}


def load_study(source: str | Path | Mapping[str, Any] | Study, *, strict: bool = True) -> Study:
    """Parse and validate a study (a TOML path, a dict of the same structure, or a Study).

    ``strict=False`` leaves operators that this build does not register to fail point by
    point (recorded as errors) instead of refusing the study.
    """
    if isinstance(source, Study):
        return source
    text = None
    where = "<dict>"
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        where = str(source)
        doc, text = read_toml(source, StudyError, "study file")
    return _validate(doc, where, text, strict)


def _loc(where: str, text: str | None, key: str) -> str:
    line = _line_of(text, key) if text is not None else None
    return f"{where}:{line}" if line else where


def _validate(doc: Mapping[str, Any], where: str, text: str | None, strict: bool = True) -> Study:
    from opsim.kernels import registry
    from opsim import devices as _devices
    from opsim.devices.names import did_you_mean

    def err(key: str, msg: str) -> StudyError:
        return StudyError(f"{_loc(where, text, key)}: key '{key}': {msg}")

    for k in doc:
        if k not in _SECTIONS:
            raise err(k, f"unknown section; allowed: {', '.join(sorted(_SECTIONS))}")
    meta = doc.get("study", {})
    if not isinstance(meta, Mapping):
        raise err("study", "must be a table")
    for k in meta:
        if k not in _STUDY_KEYS:
            raise err(f"study.{k}", f"unknown key; allowed: {', '.join(sorted(_STUDY_KEYS))}")
    name = meta.get("name", Path(where).stem if where != "<dict>" else "study")
    if not isinstance(name, str) or not name:
        raise err("study.name", "must be a non-empty string")
    mode = meta.get("mode", "estimate")
    if mode not in MODES:
        raise err("study.mode", f"{mode!r} is not one of {', '.join(MODES)}")
    seed = meta.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise err("study.seed", f"must be an integer >= 0, got {seed!r}")
    database = meta.get("database")
    if database is not None and not isinstance(database, str):
        raise err("study.database", "must be a path string")

    raw_axes = doc.get("axes")
    if not isinstance(raw_axes, Mapping) or not raw_axes:
        raise err("axes", "a study needs an [axes] table with at least the operator axis")
    flat: list[tuple[str, Any]] = []
    _flatten(raw_axes, "", flat)
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for key, values in flat:
        full = f"axes.{key}"
        head = key.split(".", 1)[0]
        if key not in PLAIN_AXES and head not in AXIS_PREFIXES:
            raise err(full, f"unknown axis; axes are {', '.join(PLAIN_AXES)}, "
                            f"tiling.<override>, override.<device field>, attr.<attribute>")
        if head in AXIS_PREFIXES and "." not in key:
            raise err(full, f"'{head}' needs a field name, e.g. {head}.<name>")
        vals = tuple(values) if isinstance(values, list) else (values,)
        if not vals:
            raise err(full, "empty axis: give at least one value")
        axes.append((key, vals))
    keys = [k for k, _ in axes]
    size, max_points = math.prod(len(v) for _, v in axes), max_study_points()
    if size > max_points:
        raise err("axes", f"the study has {size} points ({' x '.join(str(len(v)) for _, v in axes)}); "
                          f"at most {max_points} allowed (raise it with the environment variable "
                          f"OPSIM_MAX_STUDY_POINTS)")
    if "operator" not in keys:
        raise err("axes.operator", "missing: name at least one operator")
    if "mode" in keys:
        for m in dict(axes)["mode"]:
            if m not in MODES:
                raise err("axes.mode", f"{m!r} is not one of {', '.join(MODES)}")

    known_ops = registry.names()
    for op in dict(axes)["operator"]:
        # a custom operator may be named as path/to/file.py:name (opsim.register_operator)
        if not isinstance(op, str) or (strict and not registry.known(op)):
            if isinstance(op, str) and op.rpartition(":")[0].endswith(".py"):
                try:    # the file's own reason: missing, not importable, or not registering op
                    registry.get(op)
                except KeyError as exc:
                    raise err("axes.operator", exc.args[0]) from None
            raise err("axes.operator", f"unknown operator {op!r}{did_you_mean(str(op), known_ops)}; "
                                       f"known operators: {', '.join(known_ops)}")
    known_devices = _devices.catalogue()
    device_names = dict(axes).get("device", ("atlas-a2",))
    for d in device_names:
        if not isinstance(d, str) or (d not in known_devices and not d.endswith(".toml")):
            raise err("axes.device", f"unknown device {d!r}{did_you_mean(str(d), known_devices)}; "
                                     f"known devices: {', '.join(known_devices)}")
        if d not in known_devices:
            # a device file (relative to the working directory) is read now: one that cannot be
            # read or is malformed refuses the study, not every point of it (or with a traceback)
            try:
                _devices.load(d)
            except SpecError as exc:
                raise err("axes.device", str(exc)) from None
    _check_operator_keys(axes, [registry.get(op) for op in dict(axes)["operator"] if registry.known(op)], err)
    # what-if fields are checked against every device's schema now, not point by point later
    for key, vals in axes:
        if key.startswith("override."):
            field_key = key[len("override."):]
            for d in device_names:
                spec = _devices.load(d)
                for v in vals:
                    try:
                        spec.replace(field_key, v)
                    except Exception as exc:  # SpecError: unknown field or a bad value
                        raise err(f"axes.{key}", str(exc)) from None
    for key, vals in axes:
        if key == "dtype":
            for v in vals:
                _check_dtype_value(v, lambda m: err("axes.dtype", m))
        if key == "shape":
            for v in vals:
                _check_shape_value(v, lambda m: err("axes.shape", m))
        if key.startswith("tiling."):
            for v in vals:
                if not isinstance(v, int) or isinstance(v, bool):
                    raise err(f"axes.{key}", f"tiling values are integers (hex 0xF allowed), got {v!r}")

    operands = doc.get("operands", {})
    if not isinstance(operands, Mapping):
        raise err("operands", "must be a table of per-operand tables")
    for operand, table in operands.items():   # not `name`: that is the study's
        if not isinstance(table, Mapping) or set(table) - {"dtype", "shape"}:
            raise err(f"operands.{operand}", "must be a table with 'dtype' and/or 'shape'")
        if "dtype" in table:
            _check_dtype_value(table["dtype"], functools.partial(err, f"operands.{operand}.dtype"))
        if "shape" in table:
            _check_shape_value(table["shape"], functools.partial(err, f"operands.{operand}.shape"))
    if "shape" not in keys and not any("shape" in t for t in operands.values()):
        # no point would get an operand: each would fail alike with the operator's refusal of a
        # missing input (a null pointer), recorded row by row
        raise err("axes", "no shape axis and no [operands.NAME] shape: give shape = [[4096, 1024]] "
                          "(one shape for every input, or a table per operand) or [operands.NAME] shape "
                          "tables")
    plots = doc.get("plot", [])
    if isinstance(plots, Mapping):
        plots = [plots]
    for p in plots:
        if not isinstance(p, Mapping) or p.get("kind") not in ("heatmap", "lines"):
            raise err("plot.kind", "each [[plot]] needs kind = \"heatmap\" or \"lines\"")
        for k in p:
            if k not in _PLOT_KEYS:
                raise err(f"plot.{k}", f"unknown key; allowed: {', '.join(_PLOT_KEYS)}")
        if "value" in p and p["value"] not in PLOT_VALUES:
            raise err("plot.value", f"{p['value']!r} is not a numeric result column; allowed: "
                                    f"{', '.join(PLOT_VALUES)}")
        for ax in ("x", "y", "series"):
            if ax in p and p[ax] not in keys:
                raise err(f"plot.{ax}", f"{p[ax]!r} is not an axis of this study ({', '.join(keys)})")
        if "x" not in p or (p["kind"] == "heatmap" and "y" not in p):
            raise err("plot.x", "a heat map needs x and y axes, scaling lines an x axis")
    return Study(name=name, axes=tuple(axes), mode=mode, seed=seed,
                 operands={k: dict(v) for k, v in operands.items()}, plots=tuple(dict(p) for p in plots),
                 database=database, source=where, description=str(meta.get("description", "")))


def _flatten(node: Mapping[str, Any], prefix: str, out: list[tuple[str, Any]]) -> None:
    for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            _flatten(v, key + ".", out)
        else:
            out.append((key, v))


def _check_operator_keys(axes: Sequence[tuple[str, tuple[Any, ...]]], ops: Sequence[Any],
                         err: Callable[[str, str], Exception]) -> None:
    """Refuse an ``attr.*`` or ``tiling.*`` axis that none of the study's operators takes: a
    misspelt key would otherwise run every point into the same refusal, recorded row by row."""
    from opsim.devices.names import did_you_mean
    if not ops:
        return
    for key, _ in axes:
        head, _, name = key.partition(".")
        if head == "attr":
            allowed = sorted({a for op in ops for a in op.attrs})
            what = "attribute"
        elif head == "tiling":
            if any(op.tiling_keys is None for op in ops):
                continue        # an operator that does not declare its keys checks them when it plans
            allowed = sorted({k for op in ops for k in op.tiling_keys})
            what = "tiling override"
        else:
            continue
        if name not in allowed:
            names = ", ".join(op.name for op in ops)
            raise err(f"axes.{key}", f"no operator of this study ({names}) takes the {what} {name!r}"
                                     f"{did_you_mean(name, allowed)}; allowed: {', '.join(allowed) or 'none'}")


def _check_dtype_value(v: Any, fail: Callable[[str], Exception]) -> None:
    from opsim.simulator import numerics as nx
    values = v.values() if isinstance(v, Mapping) else [v]
    for d in values:
        try:
            nx.dtype(d)
        except Exception as exc:   # its message lists the allowed names
            raise fail(str(exc) if isinstance(exc, ValueError) else f"unknown dtype {d!r}") from None


def _check_shape_value(v: Any, fail: Callable[[str], Exception]) -> None:
    shapes = v.values() if isinstance(v, Mapping) else [v]
    for s in shapes:
        if not isinstance(s, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                              for x in s):
            raise fail(f"a shape is a list of non-negative integers, got {s!r}")


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGN = re.compile(rf"^\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*=")


def _split_key(k: str) -> list[str]:
    parts = re.findall(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+", k)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def _line_of(text: str | None, key: str) -> int | None:
    """1-based line of the first assignment or table header whose path matches ``key``.

    ``key`` is the dotted path as this module names it; quoted TOML keys holding dots
    (``override."ub.size"``) match the flattened spelling too.
    """
    if text is None:
        return None
    want = key.split(".")
    table: list[str] = []
    best = None
    for no, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            table = _split_key(m.group(1))
            path = ".".join(table).split(".")
            if path == want:
                return no
            if best is None and want[:len(path)] == path and len(path) >= 1 and path[0] == want[0]:
                best = no if len(want) == len(path) else best
            continue
        m = _ASSIGN.match(line)
        if m:
            path = ".".join(table + _split_key(m.group(1))).split(".")
            if path == want:
                return no
            if best is None and path[:len(want)] == want:
                best = no
    if best is None and len(want) > 1:
        return _line_of(text, ".".join(want[:-1]))
    return best


# ---------------------------------------------------------------------------------------------
# points
# ---------------------------------------------------------------------------------------------

def canonical_params(study: Study, axes: Mapping[str, Any]) -> dict[str, Any]:
    """The full, canonical parameters of a point (what its identity hashes)."""
    tiling = {k[len("tiling."):]: v for k, v in axes.items() if k.startswith("tiling.")}
    overrides = {k[len("override."):]: v for k, v in axes.items() if k.startswith("override.")}
    attrs = {k[len("attr."):]: v for k, v in axes.items() if k.startswith("attr.")}
    return {
        "operator": axes["operator"],
        "device": axes.get("device", "atlas-a2"),
        "mode": axes.get("mode", study.mode),
        "shape": axes.get("shape"),
        "dtype": axes.get("dtype"),
        "operands": {k: dict(v) for k, v in sorted(study.operands.items())},
        "tiling": dict(sorted(tiling.items())),
        "overrides": dict(sorted(overrides.items())),
        "attrs": dict(sorted(attrs.items())),
        "seed": study.seed,
    }


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def point_id(params: Mapping[str, Any]) -> str:
    """A stable identity: sha256 of the canonical JSON of the parameters (first 16 hex digits)."""
    return hashlib.sha256(_canonical_json(params).encode()).hexdigest()[:16]


def _operand_specs(opdef: Any, params: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) for every operand the point gives."""
    shape, dtype = params.get("shape"), params.get("dtype")
    fixed = params.get("operands", {})
    if isinstance(shape, Mapping):
        shapes = {k: tuple(v) for k, v in shape.items()}
    elif shape is not None:
        shapes = {n: tuple(shape) for n in opdef.inputs}
    else:
        shapes = {}
    for name, table in fixed.items():
        if "shape" in table:
            shapes[name] = tuple(table["shape"])
    known = set(opdef.inputs) | set(opdef.optional) | set(opdef.outputs)
    # every operand the point names, by shape or by dtype alone: a misspelt [operands.X] table
    # that only sets a dtype would otherwise be dropped without a word
    named = [*shapes, *fixed, *(dtype if isinstance(dtype, Mapping) else ())]
    for name in dict.fromkeys(named):
        if name not in known:
            raise ValueError(f"{opdef.name} has no operand {name!r}; operands: "
                             f"{', '.join([*opdef.inputs, *opdef.optional, *opdef.outputs])}")
    out = {}
    for name, shp in shapes.items():
        if isinstance(dtype, Mapping):
            dt = dtype.get(name, fixed.get(name, {}).get("dtype", "fp32"))
        else:
            dt = fixed.get(name, {}).get("dtype", dtype or "fp32")
        out[name] = (shp, dt)
    return out


def run_point(params: Mapping[str, Any]) -> dict[str, Any]:
    """Run one point (in a worker); returns the row's measured columns. Never raises."""
    t0 = time.perf_counter()
    try:
        row = _run(params)
    except Exception as exc:  # a failing point is recorded, the sweep goes on
        code = getattr(exc, "code", None)
        msg = getattr(exc, "message", None) or (exc.args[0] if isinstance(exc, KeyError) and exc.args
                                                 else str(exc))
        kind = type(exc).__name__
        # a machine fault's message starts with its type already ("CapacityError on core0...")
        named = msg.startswith((f"{kind} ", f"{kind}:"))
        row = {"status": "error", "error_code": code if isinstance(code, int) else None,
               "error": msg if named else f"{kind}: {msg}"}
    row["wall_s"] = time.perf_counter() - t0
    return row


def _run(params: Mapping[str, Any]) -> dict[str, Any]:
    import numpy as np

    from opsim.kernels import registry
    from opsim.api import TensorSpec, run
    from opsim.simulator import numerics as nx

    opdef = registry.get(params["operator"])
    mode = params["mode"]
    rng = np.random.default_rng(params.get("seed", 0))
    operands: dict[str, Any] = {}
    specs = _operand_specs(opdef, params)
    if mode == "full":   # the random operands are made here, before opsim.run checks the rest
        need = sum(TensorSpec(shape, dt).nbytes for name, (shape, dt) in specs.items() if name not in opdef.outputs)
        if need > host_memory_budget():
            raise HostMemoryError(f"the random operands of this point need {need} B of host memory, over the "
                                  f"budget of {host_memory_budget()} B (OPSIM_HOST_MEMORY_BUDGET)")
    for name, (shape, dt) in specs.items():
        if mode == "full" and name not in opdef.outputs:
            d = nx.dtype(dt)
            if d.is_float:
                operands[name] = rng.standard_normal(shape).astype(np.float32).astype(d.np_dtype)
            else:
                operands[name] = rng.integers(0, 2, size=shape).astype(d.np_dtype)
        else:
            operands[name] = TensorSpec(shape, dt)
    attrs = dict(params.get("attrs", {}))
    res = run(params["operator"], device=params["device"], mode=mode, trace="off",
              tiling=params.get("tiling") or None, seed=params.get("seed", 0),
              device_overrides=params.get("overrides") or None, **operands, **attrs)
    return row_of(res.stats, res.cycles, res.time_us)


def row_of(stats: Mapping[str, Any], cycles: int, time_us: float) -> dict[str, Any]:
    util = stats.get("pipe_utilisation", {}) or {}
    row = {
        "status": "ok", "error_code": None, "error": None,
        "cycles": int(cycles), "time_us": float(time_us),
        "bytes_read": stats.get("bytes_read"), "bytes_written": stats.get("bytes_written"),
        "bytes": (stats.get("bytes_read") or 0) + (stats.get("bytes_written") or 0),
        "bandwidth_GBps": stats.get("bandwidth_GBps"),
        "ub_bytes": stats.get("ub_peak_bytes"),
        "workspace_bytes": stats.get("workspace_bytes"),
        "bound": stats.get("bound"), "bound_reason": stats.get("bound_reason"),
        "block_dim": stats.get("block_dim"), "tile_length": stats.get("tile_length"),
        "buffer_num": stats.get("buffer_num"),
        "pipe_busy": _canonical_json(stats.get("pipe_busy", {})),
        "estimate_model": stats.get("estimate_model"),
    }
    for p in UTIL_PIPES:
        row[f"util_{p}"] = float(util[p]) if p in util else None
    return row


def run_points(batch: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run a batch of points in one task (amortises the worker round trip of fast points)."""
    return [run_point(p) for p in batch]


# ---------------------------------------------------------------------------------------------
# the database
# ---------------------------------------------------------------------------------------------

RESULT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("status", "TEXT"), ("error_code", "INTEGER"), ("error", "TEXT"),
    ("cycles", "INTEGER"), ("time_us", "REAL"), ("bytes_read", "INTEGER"), ("bytes_written", "INTEGER"),
    ("bytes", "INTEGER"), ("bandwidth_GBps", "REAL"), ("ub_bytes", "INTEGER"),
    ("workspace_bytes", "INTEGER"), ("bound", "TEXT"), ("bound_reason", "TEXT"),
    ("block_dim", "INTEGER"), ("tile_length", "INTEGER"), ("buffer_num", "INTEGER"),
    ("pipe_busy", "TEXT"), ("estimate_model", "TEXT"),
    *((f"util_{p}", "REAL") for p in UTIL_PIPES),
    ("wall_s", "REAL"),
    ("confirmed_cycles", "INTEGER"), ("confirmed_time_us", "REAL"), ("confirmed_bound", "TEXT"),
    ("estimate_error", "REAL"), ("confirm_error", "TEXT"),
)
# what a [[plot]] may draw: the measured numbers of a row (not its status code)
EXECUTORS = ("local", "serial", "dask")
PLOT_VALUES = tuple(n for n, t in RESULT_COLUMNS if t in ("INTEGER", "REAL") and n != "error_code")
PARAM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "TEXT PRIMARY KEY"), ("idx", "INTEGER"), ("study", "TEXT"), ("operator", "TEXT"),
    ("device", "TEXT"), ("mode", "TEXT"), ("shape", "TEXT"), ("dtype", "TEXT"), ("tiling", "TEXT"),
    ("overrides", "TEXT"), ("attrs", "TEXT"), ("params", "TEXT"),
)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _axis_column(key: str) -> str:
    return f"axis:{key}"


class _Db:
    def __init__(self, path: Path, study: Study) -> None:
        self.path = path
        self.conn = sqlite3.connect(str(path), timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        axis_cols = [(_axis_column(k), "") for k in study.axis_keys()]
        cols = [*PARAM_COLUMNS, *axis_cols, *RESULT_COLUMNS]
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS points ({', '.join(f'{_q(n)} {t}' for n, t in cols)})")
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(points)")}
        for n, t in cols:
            if n not in have:
                self.conn.execute(f"ALTER TABLE points ADD COLUMN {_q(n)} {t.replace('PRIMARY KEY', '')}")
        self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('creator', 'opsim.sweep')")
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('study_hash', ?)", (study_hash(study),))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('device_files', ?)", (device_file_digests(study),))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('study', ?)", (study.name,))
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('axes', ?)",
                          (_canonical_json([[k, list(v)] for k, v in study.axes]),))
        self.conn.commit()

    def done_ids(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT id FROM points WHERE status IS NOT NULL")}

    def count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM points").fetchone()[0]

    def write(self, point: Mapping[str, Any], row: Mapping[str, Any], *, commit: bool = True) -> None:
        """Insert or replace one point's row and commit (``commit=False``: the caller commits,
        :meth:`commit`, once per batch of rows): a kill loses at most the points in flight and those of the
        batch not yet committed."""
        params = point["params"]
        values: dict[str, Any] = {
            "id": point["id"], "idx": point["index"], "study": point["study"],
            "operator": params["operator"], "device": params["device"], "mode": params["mode"],
            "shape": _canonical_json(params["shape"]), "dtype": _canonical_json(params["dtype"]),
            "tiling": _canonical_json(params["tiling"]), "overrides": _canonical_json(params["overrides"]),
            "attrs": _canonical_json(params["attrs"]), "params": _canonical_json(params),
        }
        for k, v in point["axes"].items():
            values[_axis_column(k)] = v if isinstance(v, (int, float, str)) and not isinstance(v, bool) \
                else _canonical_json(v)
        for n, _ in RESULT_COLUMNS:
            if n in row:
                values[n] = row[n]
        names = list(values)
        self.conn.execute(f"INSERT OR REPLACE INTO points ({', '.join(_q(n) for n in names)}) "
                          f"VALUES ({', '.join('?' for _ in names)})", [values[n] for n in names])
        if commit:
            self.conn.commit()

    def commit(self) -> None:
        self.conn.commit()

    def update(self, pid: str, fields: Mapping[str, Any]) -> None:
        sets = ", ".join(f"{_q(k)} = ?" for k in fields)
        self.conn.execute(f"UPDATE points SET {sets} WHERE id = ?", [*fields.values(), pid])
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------

@dataclass
class SweepResult:
    """The database of a sweep and what this call did."""

    path: Path
    study: Study
    points: int = 0          # points in the study
    ran: int = 0             # points run by this call
    skipped: int = 0         # points already in the database (resume)
    failed: int = 0          # points of this call recorded with an error
    confirmed: int = 0       # points confirmed with the simulator

    def rows(self, where: str = "", order: str = "idx") -> list[dict[str, Any]]:
        """Every row as a dict (columns by name), ordered by point index."""
        conn = sqlite3.connect(str(self.path))
        conn.row_factory = sqlite3.Row
        try:
            sql = f"SELECT * FROM points {('WHERE ' + where) if where else ''} ORDER BY {order}"
            return [dict(r) for r in conn.execute(sql)]
        finally:
            conn.close()

    def to_csv(self, path: str | Path) -> Path:
        """Write every row to a CSV file (header = column names). A cell holds a string bare, a
        number as written, a list or dict as JSON, and nothing for no value, in every column
        (the database keeps ``shape``, ``dtype``, ``tiling``, ... as JSON whatever their value)."""
        import csv
        rows = self.rows()
        path = Path(path)
        cols = _columns(self.path)
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({k: _csv_cell(v) if k in JSON_COLUMNS else v for k, v in r.items()})
        return path

    def to_dataframe(self) -> Any:
        """The rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_dataframe() needs pandas: pip install pandas "
                              "(or use rows() / to_csv())") from None
        return pd.DataFrame(self.rows(), columns=_columns(self.path))


# the columns the database keeps as canonical JSON whatever the value (a dtype "fp32" is stored
# '"fp32"'); the axis columns keep a scalar bare and anything else as JSON already
JSON_COLUMNS = frozenset({"shape", "dtype", "tiling", "overrides", "attrs", "params", "pipe_busy"})


def _csv_cell(v: Any) -> Any:
    """A JSON column's CSV cell: the string itself for a JSON string, empty for null, else the
    JSON text (a number's text is the number's)."""
    if not isinstance(v, str):
        return v
    try:
        decoded = json.loads(v)
    except ValueError:
        return v
    if decoded is None:
        return None
    return decoded if isinstance(decoded, str) else v


def _columns(path: Path) -> list[str]:
    conn = sqlite3.connect(str(path))
    try:
        return [r[1] for r in conn.execute("PRAGMA table_info(points)")]
    finally:
        conn.close()


def open_results(path: str | Path, study: str | Path | Mapping[str, Any] | Study | None = None) -> SweepResult:
    """Results of an earlier sweep from its database file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no sweep database at {path}")
    st = load_study(study) if study is not None else Study(name=path.stem, axes=())
    return SweepResult(path, st, points=st.size if study is not None else 0)


# ---------------------------------------------------------------------------------------------
# executors
# ---------------------------------------------------------------------------------------------

def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _execute(batches: list[list[Mapping[str, Any]]], executor: str, workers: int | None,
             scheduler: str | Any | None) -> Iterator[tuple[list[Mapping[str, Any]], list[dict[str, Any]]]]:
    """Yield (batch, rows) as batches finish, in whatever order they finish."""
    params = [[p["params"] for p in b] for b in batches]
    if executor == "serial" or (executor == "local" and (workers or 1) <= 1):
        for b, ps in zip(batches, params):
            yield b, run_points(ps)
        return
    if executor == "local":
        from concurrent.futures import ProcessPoolExecutor, as_completed
        import multiprocessing as mp
        # fork is fastest on Linux; workers only read, the parent owns the database
        ctx = mp.get_context("fork") if sys.platform.startswith("linux") else None
        from concurrent.futures.process import BrokenProcessPool
        workers = max(1, min(workers or 1, len(batches)))   # no idle processes
        left: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=watch_parent,
                                 initargs=(os.getpid(),)) as pool:
            futs = {pool.submit(run_points, ps): (b, ps) for b, ps in zip(batches, params)}
            for fut in as_completed(futs):
                try:
                    rows = fut.result()
                except BrokenProcessPool:   # a worker died (killed, a native crash): see below
                    left.extend(zip(*futs[fut]))
                    continue
                yield futs[fut][0], rows
        if left:
            yield from _isolate(left, ctx)
        return
    if executor == "dask":
        try:
            from distributed import Client, as_completed as das_completed
        except ImportError:
            raise RuntimeError("executor 'dask' needs dask.distributed: pip install 'opsim[cluster]'") from None
        own = not hasattr(scheduler, "submit")
        client = _connect(Client, scheduler) if own else cast(Client, scheduler)   # a Client (it has submit)
        try:
            dask_futs = [client.submit(run_points, ps, pure=False) for ps in params]
            index = {f: b for f, b in zip(dask_futs, batches)}    # futures hash and compare by key
            for dfut in das_completed(dask_futs):
                yield index[dfut], dfut.result()
        finally:
            if own:
                client.close()
        return
    raise ValueError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")


def _connect(client_class: Any, scheduler: str | None) -> Any:
    """A dask client of the scheduler at ``scheduler`` (None: a local cluster), or a StudyError
    naming the option, the address and what to check: dask's own message ("Timed out trying to
    connect to ...") names neither the option nor a cause."""
    try:
        return client_class(scheduler)
    except (OSError, ValueError) as exc:
        if scheduler is None:
            raise
        why = str(exc).strip() or type(exc).__name__
        check = ("give it as tcp://HOST:PORT (the address `dask scheduler` prints)" if isinstance(exc, ValueError)
                 else "check that `dask scheduler` is running there and that this machine can reach that "
                      "host and port (firewall, VPN)")
        raise StudyError(f"--scheduler {scheduler}: cannot reach a dask scheduler ({why}); {check}") from None


def _isolate(points: list[tuple[Mapping[str, Any], Mapping[str, Any]]],
             ctx: Any) -> Iterator[tuple[list[Mapping[str, Any]], list[dict[str, Any]]]]:
    """The points of batches whose worker process died, one at a time in one worker: the first
    point not finished when that worker dies is the one that killed it; it is recorded as an
    error and a new worker runs the rest."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    i = 0
    while i < len(points):
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=watch_parent,
                                 initargs=(os.getpid(),)) as pool:
            futs = [pool.submit(run_points, [params]) for _, params in points[i:]]
            for fut in futs:   # one worker runs them in submission order
                point = points[i][0]
                i += 1
                try:
                    rows = fut.result()
                except BrokenProcessPool:
                    yield [point], [{"status": "error", "error_code": None, "wall_s": None,
                                     "error": "WorkerDied: the worker process running this point died "
                                              "(killed, e.g. out of memory, or a crash in native code)"}]
                    break
                yield [point], rows


def _progress(total: int, quiet: bool, desc: str) -> Any:
    if quiet or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional (extra "progress"): a plain status line instead
        from opsim.progress import SweepProgress
        return SweepProgress(total, f"study {desc}" if desc != "confirm" else desc)
    return tqdm(total=total, desc=desc, unit="pt", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# the sweep
# ---------------------------------------------------------------------------------------------

def sweep(study: str | Path | Mapping[str, Any] | Study, database: str | Path | None = None, *,
          resume: bool = False, overwrite: bool = False, executor: str = "local",
          workers: int | None = None, scheduler: str | Any | None = None, confirm_top: int = 0,
          mode: str | None = None, quiet: bool = False, batch: int | None = None,
          plot_dir: str | Path | None = None, strict: bool = True) -> SweepResult:
    """Run every point of ``study`` and record one row per point in a SQLite ``database``.

    ``resume`` skips points already recorded (a killed sweep picks up where it stopped);
    without it an existing database with rows is refused unless ``overwrite``. ``executor`` is
    ``"local"`` (worker processes, ``workers`` of them; 1 runs in this process), ``"serial"``
    or ``"dask"`` (``scheduler`` is an address or a ``distributed.Client``). ``confirm_top=K``
    estimates every point, then runs the simulator (timing mode) on the K fastest and records
    the estimate's relative error on each. ``plot_dir`` draws the study's plots there.
    ``strict=False`` records points of operators this build lacks as errors instead of
    refusing the study.
    """
    st = load_study(study, strict=strict)
    if mode is not None:
        if mode not in MODES:
            raise StudyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if "mode" in st.axis_keys():
            # each point runs its axis's mode: the override would be dropped without a word
            axis = ", ".join(str(m) for m in dict(st.axes)["mode"])
            raise StudyError.naming_options(
                f"{{mode}}{mode} would be ignored: the study has a mode axis ({axis}); remove the axis "
                f"or the option")
        st = Study(st.name, st.axes, mode, st.seed, st.operands, st.plots, st.database, st.source,
                   st.description)
    if resume and overwrite:
        # one would be dropped in silence: a resume keeps the rows an overwrite discards
        raise StudyError.naming_options("resume and overwrite exclude each other: {resume} continues the "
                                        "database, {overwrite} starts it again; give one")
    if isinstance(confirm_top, bool) or not isinstance(confirm_top, int) or confirm_top < 0:
        raise StudyError.naming_options(f"{{confirm_top}}{confirm_top!r} must be an integer >= 0")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_WORKERS):
        raise StudyError(f"workers must be an integer from 1 to {MAX_WORKERS}, got {workers!r}")
    if executor not in EXECUTORS:
        raise StudyError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    if scheduler is not None and executor != "dask":
        # it would be ignored: the sweep would run here, not on the cluster the user named
        raise StudyError.naming_options(f"scheduler {scheduler!r} is for executor 'dask', not {executor!r}; "
                                        f"add {{executor_dask}} or leave the scheduler out")
    if confirm_top and (st.mode != "estimate" or "mode" in st.axis_keys()):
        raise StudyError.naming_options(f"{{confirm_top}}{confirm_top} needs the study in estimate mode "
                                        f"(it is {st.mode!r}); the confirmation runs the simulator on the "
                                        f"best points")
    db_path = database_path(st, database)
    try:
        _check_existing(db_path, st, resume=resume, overwrite=overwrite)
    except sqlite3.DatabaseError as exc:
        raise StudyError(f"{db_path}: not a usable opsim sweep database ({exc})") from None
    if workers is None:
        workers = os.cpu_count() or 1
    db_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = _Db(db_path, st)
    except sqlite3.DatabaseError as exc:
        raise StudyError(f"{db_path}: not a usable opsim sweep database ({exc})") from None
    result = SweepResult(db_path, st, points=st.size)
    try:
        done = db.done_ids() if resume else set()
        todo = []
        for p in st.points():
            params = canonical_params(st, p["axes"])
            pid = point_id(params)
            point = {**p, "params": params, "id": pid, "study": st.name}
            if pid in done:
                result.skipped += 1
            else:
                todo.append(point)
        _run_all(db, todo, result, executor, workers, scheduler, quiet, batch, st.name)
        if confirm_top:
            _confirm(db, result, confirm_top, executor, workers, scheduler, quiet)
    finally:
        db.close()
    if plot_dir is not None:
        from opsim.study_plots import plot_study
        plot_study(result, plot_dir)
    return result


def _run_all(db: _Db, todo: list[dict[str, Any]], result: SweepResult, executor: str, workers: int,
             scheduler: Any, quiet: bool, batch: int | None, desc: str) -> None:
    if not todo:
        return
    if batch is None:
        # fast points go in batches so the worker round trip does not dominate; one batch per
        # worker would lose load balance, so aim for ~8 batches per worker, at most 16 points each
        batch = max(1, min(16, len(todo) // (max(workers, 1) * 8)))
    bar = _progress(len(todo), quiet, desc)
    try:
        for b, rows in _execute(_chunks(todo, batch), executor, workers, scheduler):
            # a batch's rows arrive together: one transaction for them (a commit per row was
            # most of this process's CPU in a fast estimate study, on the cores of the workers)
            for point, row in zip(b, rows):
                db.write(point, row, commit=False)
            db.commit()
            for row in rows:
                result.ran += 1
                if row["status"] != "ok":
                    result.failed += 1
                if bar is not None:
                    # the count first, so that the redraw of update shows this row's failure
                    bar.set_postfix(failed=result.failed, refresh=False)
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _confirm(db: _Db, result: SweepResult, k: int, executor: str, workers: int, scheduler: Any,
             quiet: bool) -> None:
    rows = db.conn.execute("SELECT id, params, cycles, confirmed_cycles, idx FROM points WHERE status = 'ok' "
                           "ORDER BY time_us ASC, idx ASC LIMIT ?", (int(k),)).fetchall()
    todo = []
    for pid, params_json, est_cycles, confirmed, idx in rows:
        if confirmed is not None:
            continue
        params = json.loads(params_json)
        params["mode"] = "timing"
        todo.append({"id": pid, "params": params, "est": est_cycles, "index": idx})
    bar = _progress(len(todo), quiet, "confirm")
    try:
        for b, outs in _execute(_chunks(todo, 1), executor, workers, scheduler):
            for point, row in zip(b, outs):
                if row["status"] == "ok":
                    err = (point["est"] - row["cycles"]) / row["cycles"] if row["cycles"] else None
                    db.update(point["id"], {"confirmed_cycles": row["cycles"],
                                            "confirmed_time_us": row["time_us"],
                                            "confirmed_bound": row["bound"], "estimate_error": err,
                                            "confirm_error": None})
                else:
                    db.update(point["id"], {"confirm_error": row["error"]})
                result.confirmed += 1
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
