"""Typed, validated device specifications loaded from TOML files.

A device file is data only. Every number in it is written as an inline table that says where
the number comes from::

    clock_hz = { value = 1800000000, source = "INI:Ascend910B2 cube_freq" }
    chunk    = { value = 65536, assumption = "L2 LRU granule; not published" }

A table may instead carry one ``source`` or ``assumption`` key that covers all of its plain
numbers (used for the calibrated cost table). The loader checks the file against the schema
below, rejects anything malformed with a message naming the file and the dotted field, and
builds frozen dataclasses the simulator reads (``spec.ub.size``, ``spec.gm.bandwidth``).

What-if studies change a field by its dotted key: ``spec.replace("ub.size", 262144)``. The
replacement goes through the same validation and its provenance is recorded as an override.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .limits import check_spec, limit, toml_depth
from .names import did_you_mean
from .toml_lines import with_line

__all__ = [
    "SpecError", "Provenance", "DeviceSpec", "load", "load_file", "catalogue", "CATALOGUE_DIR",
]

CATALOGUE_DIR = Path(__file__).resolve().parent


class SpecError(ValueError):
    """A device file or an override does not match the schema."""


@dataclass(frozen=True)
class Provenance:
    """Where a number comes from: a published/derived ``source`` or an ``assumption``."""

    kind: str  # "source" | "assumption" | "override"
    text: str


# ---------------------------------------------------------------------------------------------
# Schema. Each section is a frozen dataclass; field types drive validation.
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cores:
    architecture: str  # "split" (AIC/AIV separate), "coupled" (one AI core has all pipes), "dsp"
    aic: int = 0       # cube cores (split) or AI cores (coupled)
    aiv: int = 0       # vector cores (split); equals aic on coupled parts
    dsp: int = 0       # DSP cores


@dataclass(frozen=True)
class Buffer:
    """A per-core on-chip buffer (UB, L1, L0A, L0B, L0C)."""

    size: int
    alignment: int = 32


@dataclass(frozen=True)
class GlobalMemory:
    """Device memory (HBM or DDR) shared by every core."""

    kind: str          # "HBM" | "DDR"
    base: int          # first device address
    window: int        # bytes of address space
    capacity: int      # bytes that exist
    bandwidth: float   # peak bytes per second of the shared link
    alignment: int = 32


@dataclass(frozen=True)
class L2Cache:
    """The Ascend L2: an LRU cache over fixed-size chunks of GM."""

    size: int
    chunk: int
    read_rate: float    # bytes/cycle per core on a hit
    write_rate: float   # bytes/cycle per core
    bandwidth: float    # aggregate bytes per second
    # "write-through": a store costs HBM bandwidth when it is made; "write-back": a store is
    # taken by the L2 (at the L2 rate) and the line is written to HBM when it is evicted dirty
    write_policy: str = "write-through"


@dataclass(frozen=True)
class PathRates:
    """Per-core data-path rates in bytes per cycle ([AICoreMemoryRates] of the INI)."""

    gm_read: float = 0.0
    gm_write: float = 0.0
    l2_read: float = 0.0
    l2_write: float = 0.0
    l1_to_l0a: float = 0.0
    l1_to_l0b: float = 0.0
    l1_to_ub: float = 0.0
    l0c_to_ub: float = 0.0
    l0c_to_gm: float = 0.0
    ub_to_l2: float = 0.0
    ub_to_gm: float = 0.0
    ub_to_l1: float = 0.0


@dataclass(frozen=True)
class DmaModel:
    """A calibrated DMA direction: per-transfer rate ``base + shared/n`` plus a start-up latency.

    ``shared`` is bandwidth split among the ``n`` transfers in flight in this direction
    (Huawei's fitted MTE model ``t = a + b/blockDim``); ``head`` is paid once per core per launch
    on the pipe's first instruction (``head + head_per_block * blockDim``, blockDim the blocks
    running at once: assumption A-9). A pipe with ``head_large_from`` > 0 (MTE2) has a second,
    large-load form ``head_large + head_large_per_block * blockDim`` for a launch whose loads
    reach ``head_large_from`` bytes; a core pays it with the first such load (assumption A-10).
    """

    base: float
    shared: float = 0.0
    startup: int = 0
    head: float = 0.0
    head_per_block: float = 0.0
    head_large: float = 0.0
    head_large_per_block: float = 0.0
    head_large_from: int = 0      # bytes of one load from which the large form applies; 0: none


@dataclass(frozen=True)
class Launch:
    overhead: int         # cycles from launch to the first block starting
    gap: int = 0          # cycles between a task and the next one queued behind it on a stream
    #                       (the gap between the launches of one aclnn call), on top of overhead


@dataclass(frozen=True)
class HostLink:
    """The host <-> device link that aclrtMemcpy / hthread copies cross (PCIe, HCCS, on-chip)."""

    kind: str             # "PCIe", "SoC" (host CPU on the same chip), ...
    bandwidth: float      # bytes per second per direction achieved by a large copy
    latency_us: float = 0.0   # fixed cost of one copy call (setup, completion), microseconds


@dataclass(frozen=True)
class Vector:
    compute_dtypes: tuple[str, ...]      # dtypes the vector ALU does arithmetic in
    repeat_bytes: int                    # bytes per repeat (256 on Ascend)
    max_repeat: int                      # repeatTimes limit per instruction
    head: float                          # one-off cycles on a core's first vector instruction of a launch
    cost: Mapping[str, Mapping[str, tuple[float, float]]]  # op -> dtype -> (k, b): cycles = k*N + b
    lanes: Mapping[str, int] = field(default_factory=dict)  # elements per cycle (DSPs)


@dataclass(frozen=True)
class Cube:
    m: int
    k: int
    n: int
    macs_per_cycle: Mapping[str, float]   # per input dtype


@dataclass(frozen=True)
class Window:
    """An address window (DSP private memory, shared on-chip memory)."""

    base: int
    window: int
    capacity: int
    alignment: int = 4


@dataclass(frozen=True)
class Scalar:
    cycles_per_op: float   # SCALAR pipe cost of one scalar instruction
    queue_depth: int       # entries (instructions and flags) each pipe's instruction queue holds;
    #                        the in-order dispatcher stalls when the target queue is full


_SECTIONS: dict[str, type] = {
    "cores": Cores, "ub": Buffer, "l1": Buffer, "l0a": Buffer, "l0b": Buffer, "l0c": Buffer,
    "gm": GlobalMemory, "l2": L2Cache, "rates": PathRates, "mte2": DmaModel, "mte3": DmaModel,
    "mte1": DmaModel, "fixp": DmaModel, "dma": DmaModel, "launch": Launch, "vector": Vector,
    "cube": Cube, "private": Window, "smc": Window, "scalar": Scalar, "host": HostLink,
}
_REQUIRED = {"cores", "gm", "launch", "vector", "scalar"}
_TOP_STRINGS = {"name", "product", "soc", "family", "series", "description"}
_TOP_NUMBERS = {"clock_hz"}
# Free-form per-operator budgets (e.g. the UB budget the embedding kernel plans with).
_KERNELS = "kernels"


@dataclass(frozen=True)
class DeviceSpec:
    """One product's hardware description. Frozen; derive variants with :meth:`replace`."""

    name: str
    product: str
    soc: str
    family: str           # "ascend" | "dsp"
    series: str           # "training" | "inference" | "a2" | "a3" | "200i-500-a2" | "ft78ne" | "mt7004"
    clock_hz: int
    cores: Cores
    gm: GlobalMemory
    launch: Launch
    vector: Vector
    scalar: Scalar
    ub: Buffer | None = None
    l1: Buffer | None = None
    l0a: Buffer | None = None
    l0b: Buffer | None = None
    l0c: Buffer | None = None
    l2: L2Cache | None = None
    rates: PathRates = PathRates()
    mte2: DmaModel | None = None
    mte3: DmaModel | None = None
    mte1: DmaModel | None = None
    fixp: DmaModel | None = None
    dma: DmaModel | None = None
    cube: Cube | None = None
    private: Window | None = None
    smc: Window | None = None
    host: HostLink | None = None
    kernels: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    description: str = ""
    provenance: Mapping[str, Provenance] = field(default_factory=dict, compare=False, repr=False)
    origin: str = field(default="", compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- conveniences used all over the simulator --------------------------------------------
    def cycles_to_us(self, cycles: float) -> float:
        return cycles * 1e6 / self.clock_hz

    def bytes_per_cycle(self, bytes_per_second: float) -> float:
        return bytes_per_second / self.clock_hz

    @property
    def vector_cores(self) -> int:
        """Cores a vector-only kernel can use (AIV on split parts, AI cores when coupled)."""
        return self.cores.dsp if self.family == "dsp" else self.cores.aiv

    def get(self, key: str) -> Any:
        """The plain value at a dotted key (``"ub.size"``, ``"clock_hz"``, ``"hbm.bandwidth"``)."""
        node: Any = self.raw
        for part in _canonical_key(self.raw, key).split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise SpecError(f"{self.name}: no field '{key}'")
            node = node[part]
        return node

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its file's values, as loaded: the read-only mapping views it holds do not
        # pickle, and a run's result (which carries its spec) must cross process pools
        return (_rebuild_spec, (copy.deepcopy(dict(self.raw)), dict(self.provenance), self.origin, self.name))

    def replace(self, key: str, value: Any, *, note: str = "what-if override") -> "DeviceSpec":
        """A new spec with the dotted field ``key`` set to ``value``, validated like a file."""
        return self.replace_many({key: value}, note=note)

    def replace_many(self, overrides: Mapping[str, Any], *, note: str = "what-if override") -> "DeviceSpec":
        raw = copy.deepcopy(dict(self.raw))
        prov = dict(self.provenance)
        for key, value in overrides.items():
            ckey = _canonical_key(raw, key)
            parts = ckey.split(".")
            node = raw
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise SpecError(f"{self.name}: unknown field '{key}' (no section '{part}')"
                                    f"{did_you_mean(key, _leaf_keys(raw))}")
                node = node[part]
            leaf = parts[-1]
            if leaf not in node and not _settable_new_leaf(parts):
                raise SpecError(f"{self.name}: unknown field '{key}'{did_you_mean(key, _leaf_keys(raw))}; "
                                f"known fields: {', '.join(sorted(_leaf_keys(raw)))}")
            value = _plain_scalar(value)
            node[leaf] = value
            for stale in [k for k in prov if k.startswith(ckey + ".")]:
                del prov[stale]  # provenance of sub-fields of a replaced table no longer applies
            prov[ckey] = Provenance("override", f"{note}: {key} = {value!r}")
        return _build(raw, prov, origin=f"{self.origin} + overrides", where=self.name)


def _rebuild_spec(raw: dict[str, Any], prov: dict[str, Provenance], origin: str, where: str) -> "DeviceSpec":
    return _build(raw, prov, origin=origin, where=where)


def _plain_scalar(value: Any) -> Any:
    """A numpy number as the Python number it equals: a numpy integer as int (a sweep over
    np.arange), a numpy float as float (np.float32 for a clock or a bandwidth), so that the spec,
    its provenance note and every record of the run are the plain call's. The fields' checks then
    judge it as a plain number (NaN or infinity is refused where it is today); anything else, a
    bool (np.bool_ is no Integral: no device field is boolean) or an array, is left as it is for
    them to refuse."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _settable_new_leaf(parts: list[str]) -> bool:
    # Optional dataclass fields with defaults (e.g. vector.lanes) may be absent from a file.
    if len(parts) != 2 or parts[0] not in _SECTIONS:
        return False
    return parts[1] in {f.name for f in dataclasses.fields(_SECTIONS[parts[0]])}


def _leaf_keys(raw: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in raw.items():
        if isinstance(v, Mapping) and k not in ("cost",):
            out.extend(_leaf_keys(v, f"{prefix}{k}."))
        else:
            out.append(f"{prefix}{k}")
    return out


def _canonical_key(raw: Mapping[str, Any], key: str) -> str:
    """Accept the memory's own name for GM (``hbm.bandwidth`` / ``ddr.bandwidth``)."""
    head, _, rest = key.partition(".")
    gm = raw.get("gm")
    if head in ("hbm", "ddr") and isinstance(gm, Mapping) and str(gm.get("kind", "")).lower() == head:
        return f"gm.{rest}" if rest else "gm"
    return key


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

_PROV_KEYS = ("source", "assumption")


def _strip(node: Any, path: str, where: str, prov: dict[str, Provenance],
           inherited: Provenance | None) -> Any:
    """Replace ``{value, source|assumption}`` leaves by their value, recording provenance."""
    if isinstance(node, dict):
        keys = set(node)
        if "value" in keys:
            extra = keys - {"value", *_PROV_KEYS}
            given = [k for k in _PROV_KEYS if k in node]
            if extra:
                raise SpecError(f"{where}: field '{path}' has unexpected keys {sorted(extra)}")
            if len(given) != 1 or not isinstance(node[given[0]], str) or not node[given[0]].strip():
                raise SpecError(f"{where}: field '{path}' must carry exactly one non-empty "
                                f"'source' or 'assumption' string")
            prov[path] = Provenance(given[0], node[given[0]])
            return node["value"]
        own = [k for k in _PROV_KEYS if k in node and isinstance(node[k], str)]
        table_prov = Provenance(own[0], node[own[0]]) if own else inherited
        out = {}
        for k, v in node.items():
            if k in own:
                continue
            sub = f"{path}.{k}" if path else k
            out[k] = _strip(v, sub, where, prov, table_prov)
        return out
    if isinstance(node, bool) or isinstance(node, str):
        return node
    if isinstance(node, (int, float)) or (isinstance(node, list) and node and
                                           all(isinstance(x, (int, float)) for x in node)):
        if inherited is None:
            raise SpecError(f"{where}: number at '{path}' has no provenance: write it as "
                            f"{{ value = {node!r}, source = \"...\" }} or {{ ..., assumption = \"...\" }}")
        prov[path] = inherited
        return node
    if isinstance(node, list):
        return [_strip(v, f"{path}[{i}]", where, prov, inherited) for i, v in enumerate(node)]
    return node


def _coerce(value: Any, typ: Any, path: str, where: str) -> Any:
    typ_s = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    if typ_s in ("int",):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()):
            raise SpecError(f"{where}: field '{path}' must be an integer, got {value!r}")
        if value < 0:
            raise SpecError(f"{where}: field '{path}' must be >= 0, got {value!r}")
        return int(value)
    if typ_s in ("float",):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{where}: field '{path}' must be a finite number, got {value!r}")
        if value < 0:
            raise SpecError(f"{where}: field '{path}' must be >= 0, got {value!r}")
        return float(value)
    if typ_s in ("str",):
        if not isinstance(value, str):
            raise SpecError(f"{where}: field '{path}' must be a string, got {value!r}")
        return value
    if typ_s.startswith("tuple[str"):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{where}: field '{path}' must be a list of strings, got {value!r}")
        return tuple(value)
    if typ_s.startswith("Mapping[str, Mapping[str, tuple"):
        if not isinstance(value, Mapping):
            raise SpecError(f"{where}: field '{path}' must be a table of op -> dtype -> [k, b]")
        out = {}
        for op, per_dt in value.items():
            if not isinstance(per_dt, Mapping):
                raise SpecError(f"{where}: field '{path}.{op}' must map dtype -> [k, b]")
            inner = {}
            for dt, kb in per_dt.items():
                if (not isinstance(kb, (list, tuple)) or len(kb) != 2
                        or not all(isinstance(x, (int, float)) and x >= 0 for x in kb)):
                    raise SpecError(f"{where}: field '{path}.{op}.{dt}' must be [k, b] with k, b >= 0, "
                                    f"got {kb!r}")
                inner[dt] = (float(kb[0]), float(kb[1]))
            out[op] = MappingProxyType(inner)
        return MappingProxyType(out)
    if typ_s.startswith("Mapping[str, int]") or typ_s.startswith("Mapping[str, float]"):
        if not isinstance(value, Mapping) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value.values()):
            raise SpecError(f"{where}: field '{path}' must be a table of positive numbers, got {value!r}")
        conv = int if "int]" in typ_s else float
        return MappingProxyType({k: conv(v) for k, v in value.items()})
    raise SpecError(f"{where}: field '{path}': unsupported schema type {typ_s}")  # pragma: no cover


def _section(cls: type, data: Any, name: str, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: '{name}' must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(f'{name}.{u}' for u in sorted(unknown))}; "
                        f"allowed in [{name}]: {', '.join(fields)}")
    kwargs = {}
    for fname, f in fields.items():
        if fname not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{where}: missing field '{name}.{fname}'")
            continue
        kwargs[fname] = _coerce(data[fname], f.type, f"{name}.{fname}", where)
    return cls(**kwargs)


def _build(raw: dict[str, Any], prov: dict[str, Provenance], origin: str, where: str) -> DeviceSpec:
    known = _TOP_STRINGS | _TOP_NUMBERS | set(_SECTIONS) | {_KERNELS}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"{where}: unknown top-level field(s) {sorted(unknown)}; allowed: {sorted(known)}")
    for key in ("name", "product", "soc", "family", "series"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SpecError(f"{where}: missing or empty string field '{key}'")
    if raw["family"] not in ("ascend", "dsp"):
        raise SpecError(f"{where}: field 'family' must be 'ascend' or 'dsp', got {raw['family']!r}")
    missing = _REQUIRED - set(raw)
    if raw["family"] == "ascend":
        missing |= {"ub", "rates", "mte2", "mte3"} - set(raw)
    else:
        missing |= {"dma", "private"} - set(raw)
    if missing:
        raise SpecError(f"{where}: missing section(s) {sorted(missing)}")
    kwargs: dict[str, Any] = {k: raw[k] for k in _TOP_STRINGS if k in raw}
    kwargs["clock_hz"] = _coerce(raw.get("clock_hz"), "int", "clock_hz", where)
    if kwargs["clock_hz"] <= 0:
        raise SpecError(f"{where}: field 'clock_hz' must be > 0")
    for sec, cls in _SECTIONS.items():
        if sec in raw:
            kwargs[sec] = _section(cls, raw[sec], sec, where)
    cores: Cores = kwargs["cores"]
    if cores.architecture not in ("split", "coupled", "dsp"):
        raise SpecError(f"{where}: field 'cores.architecture' must be split, coupled or dsp, "
                        f"got {cores.architecture!r}")
    if cores.architecture == "dsp" and cores.dsp <= 0:
        raise SpecError(f"{where}: field 'cores.dsp' must be > 0 on a DSP")
    if cores.architecture != "dsp" and (cores.aiv <= 0 or cores.aic <= 0):
        raise SpecError(f"{where}: fields 'cores.aic' and 'cores.aiv' must be > 0 on an Ascend part")
    if cores.architecture == "coupled" and cores.aiv != cores.aic:
        # one AI core has both units: the simulator builds cores.aic of them and a vector
        # kernel's plan splits over cores.aiv, so the two counts must be the same cores
        raise SpecError(f"{where}: on a coupled part (cores.architecture = 'coupled') every AI core "
                        f"runs the vector code: field 'cores.aiv' ({cores.aiv}) must equal 'cores.aic' "
                        f"({cores.aic}); set both")
    if kwargs["gm"].kind not in ("HBM", "DDR"):
        raise SpecError(f"{where}: field 'gm.kind' must be 'HBM' or 'DDR', got {kwargs['gm'].kind!r}")
    if kwargs["gm"].bandwidth <= 0:
        raise SpecError(f"{where}: field 'gm.bandwidth' must be > 0")
    l2 = kwargs.get("l2")
    if l2 is not None and l2.write_policy not in ("write-through", "write-back"):
        raise SpecError(f"{where}: field 'l2.write_policy' must be 'write-through' or 'write-back', "
                        f"got {l2.write_policy!r}")
    host = kwargs.get("host")
    if host is not None and host.bandwidth <= 0:
        raise SpecError(f"{where}: field 'host.bandwidth' must be > 0")
    kernels = raw.get(_KERNELS, {})
    if not isinstance(kernels, Mapping):
        raise SpecError(f"{where}: '{_KERNELS}' must be a table of per-operator tables")
    for op, table in kernels.items():
        if not isinstance(table, Mapping):
            raise SpecError(f"{where}: field '{_KERNELS}.{op}' must be a table of per-operator values")
    kwargs["kernels"] = MappingProxyType({k: MappingProxyType(dict(v)) for k, v in kernels.items()})
    spec = DeviceSpec(**kwargs, provenance=MappingProxyType(prov), origin=origin,
                      raw=MappingProxyType(raw))
    check_spec(spec, lambda msg: SpecError(f"{where}: {msg}"))
    return spec


def read_toml(path: str | Path, error: type[Exception], what: str) -> tuple[dict[str, Any], str]:
    """(document, text) of a TOML file; an unreadable or malformed file raises ``error`` with a
    message naming the file (TOMLDecodeError's message carries the line and column)."""
    where = str(path)
    max_bytes = limit("MAX_FILE_BYTES")
    try:
        p = Path(path)
        if p.exists() and not p.is_file():
            # a device node (/dev/zero), FIFO or directory: reading it may never end
            raise error(f"{where}: cannot read {what}: not a regular file")
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise error(f"{where}: {what} is larger than {max_bytes} bytes (limit MAX_FILE_BYTES; raise it "
                    f"with the environment variable OPSIM_LIMIT_MAX_FILE_BYTES)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: {what} is not UTF-8 text (byte {exc.start})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where}: malformed TOML: {exc}") from None
    except RecursionError:
        raise error(f"{where}: {what} is nested too deeply to parse") from None
    depth, max_depth = toml_depth(doc), limit("MAX_TOML_DEPTH")
    if depth > max_depth:
        raise error(f"{where}: {what} nests tables/arrays {depth} deep; at most {max_depth} allowed "
                    f"(limit MAX_TOML_DEPTH)")
    return doc, text


def load_file(path: str | Path) -> DeviceSpec:
    """Load and validate one device TOML file (a catalogue entry or a user's own file)."""
    where = str(path)
    doc, text = read_toml(path, SpecError, "device file")
    prov: dict[str, Provenance] = {}
    try:
        raw = _strip(doc, "", where, prov, None)
        return _build(raw, prov, origin=where, where=where)
    except SpecError as exc:
        # point at the line of the field the message names (tomllib keeps no positions)
        raise SpecError(with_line(str(exc), where, text)) from None


def catalogue() -> list[str]:
    """Names of the devices shipped in ``devices/`` (sorted)."""
    return sorted(p.stem for p in CATALOGUE_DIR.glob("*.toml"))


_CACHE: dict[str, DeviceSpec] = {}


def load(name_or_path: str | Path) -> DeviceSpec:
    """A catalogue device by name (``"atlas-a2"``) or a device file by path."""
    s = str(name_or_path)
    if s.endswith(".toml") or "/" in s:
        return load_file(s)
    if s not in _CACHE:
        path = CATALOGUE_DIR / f"{s}.toml"
        if not path.exists():
            raise SpecError(f"unknown device '{s}'{did_you_mean(s, catalogue())}; known devices: "
                            f"{', '.join(catalogue())} (or a device file, path/to/device.toml)")
        _CACHE[s] = load_file(path)
    return _CACHE[s]
