"""``@asc.jit`` and the launch ``kernel[block_dim, stream](*args)`` on a simulated device.

A launch builds a fresh simulated device (``opsim.asc.set_device`` or ``device=``), copies the
host arrays that play the kernel's GM tensors into device memory (each becomes a
:class:`GlobalAddress` parameter), runs ``block_dim`` blocks through the simulator's own
launch/dispatch machinery, copies every array the kernel changed back in place and returns a
:class:`KernelResult` (cycles, µs, stats and trace, like ``opsim.run``).

Kernel kinds, as the pyasc compiler decides them from what the kernel uses: a kernel with only
vector work runs on the vector cores (AIV); ``@asc.jit(matmul_cube_only=True)`` or a kernel with
only cube work runs on the cube cores (AIC); a kernel with ``asc.adv.Matmul`` (or both cube
and vector work) is a mixed kernel: block i runs the function on a cube core and on each of its
vector cores (``ascend_is_aic()`` / ``ascend_is_aiv()`` tell them apart). ``kernel_type=
"vector" | "cube" | "mix"`` forces the kind.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from opsim.asc import _core
from opsim.asc.tensor import GlobalAddress
from opsim.stats import RunStats
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device, MixKernel
from opsim.simulator.errors import SimulatorError, chain_kernel_line_note, name_kernel_line
from opsim.simulator.tile import GlobalTensor as SimGlobalTensor

_DEFAULT_DEVICE = ["atlas-a2"]
_RESERVED = ("device", "sanitize", "trace", "seed")

CUBE_NAMES = frozenset({"Matmul", "register_matmul", "mmad", "load_data", "fixpipe", "load_data_with_transpose"})
VECTOR_NAMES = frozenset({"add", "sub", "mul", "div", "max", "min", "adds", "muls", "maxs", "mins", "exp", "ln",
                          "abs", "sqrt", "rsqrt", "reciprocal", "relu", "leaky_relu", "cast", "duplicate",
                          "compare", "compare_scalar", "select", "reduce_sum", "reduce_max", "reduce_min",
                          "whole_reduce_sum", "whole_reduce_max", "whole_reduce_min", "data_copy_pad", "copy"})


def set_device(name: Any) -> None:
    """Choose the simulated device of later launches (a catalogue name, default "atlas-a2")."""
    from opsim.api import device_spec
    device_spec(name)            # fails now, naming the catalogue, if the name is unknown
    _DEFAULT_DEVICE[0] = name


def get_device() -> Any:
    return _DEFAULT_DEVICE[0]


class ConstExpr:
    """``asc.ConstExpr[int]``: a compile-time constant parameter (an annotation only here)."""

    def __class_getitem__(cls, item: Any) -> Any:
        return item


@dataclass(frozen=True)
class KernelResult:
    """What one launch produced: like ``opsim.RunResult`` (outputs, cycles, time_us, stats,
    trace) plus the sanitizer report when the launch asked for one."""

    op: str
    device: str
    mode: str
    outputs: dict[str, np.ndarray]
    cycles: int
    time_us: float
    stats: RunStats
    trace: Any = field(default=None, repr=False)
    tiling: Any = None
    sanitizer: Any = None
    # what the launch did (traces.tables.LaunchRecord), as opsim.RunResult.launch_records
    launch_records: tuple = field(default=(), repr=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """The msprof-style profiler tables of this launch, as ``opsim.RunResult.tables``:
        ``op_summary``, ``pipe_utilization``, ``instr_exe`` and ``code_exe`` (the last per
        kernel source line); write them with ``opsim.traces.tables.write_tables(
        res.launch_records, path)``. See docs/profiling.md."""
        from opsim.traces.tables import TABLES, op_summary
        recs = list(self.launch_records)
        return {name: (op_summary(recs, self.stats.get("gm_link", "HBM")) if name == "op_summary"
                       else fn(recs)) for name, fn in TABLES.items()}


@dataclass
class LaunchPlan:
    """What every block of one launch shares."""

    name: str
    block_dim: int
    kind: str                    # "vector" | "cube" | "mix"
    device: Device
    groups: dict[int, Any] = field(default_factory=dict)    # mixed launches: block -> message group
    options: dict[str, Any] = field(default_factory=dict)
    workspace: Any = None        # set_sys_workspace
    core_mask: int | None = None

    def resident_blocks(self) -> int:
        """How many blocks of the launch can run at once: the cores its blocks go to (a mixed
        launch's blocks are groups, one per cube core), or those of the core mask."""
        if self.core_mask:
            return bin(self.core_mask).count("1")
        return len(self.device.units("vector" if self.kind == "vector" else "cube"))


# ---------------------------------------------------------------------------------------------
# with matmul.iterate() as count:  ->  for count in matmul.iterate():
# ---------------------------------------------------------------------------------------------

class _IterateLoops(ast.NodeTransformer):
    """pyasc compiles ``with mm.iterate() as count: body`` into a loop over the matmul's result
    tiles; plain Python would run the body once, so the front-end rewrites it into a ``for``."""

    changed = False

    def visit_With(self, node: ast.With) -> Any:
        self.generic_visit(node)
        if len(node.items) == 1:
            item = node.items[0]
            call = item.context_expr
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "iterate"):
                self.changed = True
                target = item.optional_vars or ast.Name(id="_asc_iteration", ctx=ast.Store())
                loop = ast.For(target=target, iter=call, body=node.body, orelse=[])
                return ast.copy_location(loop, node)
        return node


def _rewrite(fn: Callable) -> Callable:
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        first = fn.__code__.co_firstlineno
    except (OSError, TypeError):
        return fn
    if ".iterate(" not in src:
        return fn
    tree = ast.parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        return fn
    fdef.decorator_list = []
    tr = _IterateLoops()
    tree = tr.visit(tree)
    if not tr.changed or fn.__code__.co_freevars:
        return fn
    ast.increment_lineno(tree, first - 1)
    ast.fix_missing_locations(tree)
    code = compile(tree, filename, "exec")
    ns: dict[str, Any] = {}
    exec(code, fn.__globals__, ns)
    new = ns[fn.__name__]
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def _names(fn: Callable, seen: set | None = None) -> set[str]:
    """Global and attribute names a function (and the jit functions it calls) refers to."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return set()
    seen.add(id(fn))
    out: set[str] = set()

    def walk(code: types.CodeType) -> None:
        out.update(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                walk(c)
    code = getattr(fn, "__code__", None)
    if code is None:
        return out
    walk(code)
    g = getattr(fn, "__globals__", {})
    for n in list(out):
        v = g.get(n)
        if isinstance(v, JitFunction):
            out |= _names(v.fn, seen)
    return out


class JitFunction:
    """A function decorated with ``@asc.jit``: launch it with ``kernel[block_dim, stream](...)``;
    inside a kernel, call it like a plain function (a jit sub-function)."""

    def __init__(self, fn: Callable, options: dict[str, Any]) -> None:
        self.fn = fn
        self.options = dict(options)
        self._run_fn: Callable | None = None
        functools.update_wrapper(self, fn)

    @property
    def run_fn(self) -> Callable:
        if self._run_fn is None:
            self._run_fn = _rewrite(self.fn)
        return self._run_fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _core.in_kernel():
            self.check_not_generator()
            return self.run_fn(*args, **kwargs)
        raise TypeError(f"{self.fn.__name__} is an @asc.jit kernel: launch it as "
                        f"{self.fn.__name__}[block_dim, stream](...)")

    def __getitem__(self, grid: Any) -> Callable[..., KernelResult]:
        if not isinstance(grid, tuple):
            grid = (grid,)
        block_dim = grid[0]
        if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)) or block_dim < 1:
            raise ValueError(f"{self.fn.__name__}[block_dim, stream]: block_dim must be an integer >= 1, "
                             f"got {block_dim!r}")
        stream = grid[1] if len(grid) > 1 else None
        return functools.partial(launch, self, int(block_dim), stream)

    def check_not_generator(self) -> None:
        """Refuse a function that yields: called, it would only make a generator, so none of
        its API calls would run and the kernel would silently do nothing."""
        fn = self.fn
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            code = fn.__code__
            raise TypeError(f"@asc.jit function {fn.__name__} ({code.co_filename}:{code.co_firstlineno}) "
                            f"contains `yield`, so calling it would run none of its body: an opsim.asc "
                            f"kernel calls the asc API and yields nothing. A generator kernel of the "
                            f"simulator's own kernel language (def kernel(ctx, ...) yielding instructions) "
                            f"is not decorated with @asc.jit: launch it with Device.launch or "
                            f"opsim.register_operator (docs/custom-operators.md)")

    def inserts_sync(self) -> bool:
        """Whether the launch gets the flags of pyasc's insert-sync pass: ``insert_sync=True``,
        or (pyasc's default, ``None``) a kernel that creates ``asc.LocalTensorAuto`` tensors."""
        opt = self.options.get("insert_sync")
        if opt is None:
            return "LocalTensorAuto" in _names(self.fn)
        return bool(opt)

    def kind(self) -> str:
        forced = self.options.get("kernel_type")
        if forced is not None:
            from opsim.asc.runtime.config import KernelType
            if isinstance(forced, KernelType):
                return forced.kind
            if forced not in ("vector", "cube", "mix"):
                raise ValueError(f"kernel_type {forced!r} is not one of vector, cube, mix "
                                 f"or a config.KernelType")
            return forced
        if self.options.get("matmul_cube_only"):
            return "cube"
        names = _names(self.fn)
        if "Matmul" in names or "register_matmul" in names:
            return "mix"
        if names & CUBE_NAMES:
            return "mix" if names & VECTOR_NAMES else "cube"
        return "vector"


def jit(fn: Callable | None = None, **options: Any) -> Any:
    """``@asc.jit`` or ``@asc.jit(**options)``. Compiler options (``always_compile``, …) mean
    nothing to the simulator and are accepted; ``matmul_cube_only=True`` makes a cube-only
    kernel; ``kernel_type=config.KernelType.AIV_ONLY`` (or ``"vector"``, ``"cube"``, ``"mix"``)
    forces the kind; ``insert_sync=True`` (the default for a kernel that uses
    ``asc.LocalTensorAuto``) inserts the flags between pipes that pyasc's compiler inserts
    (opsim.asc.autosync); opsim's own options: ``device=``, ``sanitize=``, ``trace=``."""
    if fn is None:
        return lambda f: JitFunction(f, options)
    return JitFunction(fn, options)


# ---------------------------------------------------------------------------------------------
# the launch
# ---------------------------------------------------------------------------------------------

def _as_host_array(value: Any) -> np.ndarray | None:
    """A numpy view of a host array argument (numpy, or a CPU torch tensor), else None."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        if getattr(getattr(value, "device", None), "type", "cpu") != "cpu":
            raise ValueError("opsim.asc runs on host memory: pass CPU tensors")
        if str(value.dtype) == "torch.bfloat16":      # numpy has no bf16: view the bits
            import torch
            return value.detach().view(torch.int16).numpy().view(nx.BF16.np_dtype)
        return value.detach().numpy()              # shares the tensor's memory: copy-back is in place
    return None


def _trace(level: str, spec: Any, name: str) -> Any:
    from opsim.traces.trace import LEVELS, Trace
    if level == "off":
        return None
    if level not in LEVELS:
        raise ValueError(f"trace level {level!r} is not one of {', '.join(LEVELS)}")
    from opsim.api import _version
    # shapes and dtypes: of the kernel's array arguments, by parameter name (filled by launch)
    return Trace(level, spec.clock_hz, metadata={"device": spec.name, "product": spec.product,
                                                  "operator": name, "mode": "full", "frontend": "opsim.asc",
                                                  "shapes": {}, "dtypes": {}, "opsim_version": _version()})


def _sanitizer(device: Device) -> Any:
    """The sanitizer attached to ``device`` for a launch with sanitize=True (docs/sanitizer.md)."""
    from opsim.simulator.sanitizer import Sanitizer
    return Sanitizer(device)


def launch_on(dev: Any, stream: Any, jf: "JitFunction", block_dim: int, call_args: tuple,
              call_kwargs: Mapping[str, Any], *, options: Mapping[str, Any],
              core_mask: int | None = None, name: str | None = None, gm_tensors: tuple = ()) -> Any:
    """Launch ``jf`` with ``call_args`` (GM tensors already as GlobalAddress) on ``block_dim``
    blocks of an existing device and stream; returns the simulator's Launch. A vector, cube or
    mixed kernel goes to the matching cores of the part (split AIC/AIV or coupled AI cores).
    ``gm_tensors`` (simulator GlobalTensors, with the host arrays' shapes) become the launch's
    arguments: the kernel reads its GlobalAddress parameters, the profiler's op_summary lists
    these as the launch's input and output tensors."""
    name = name or jf.fn.__name__
    jf.check_not_generator()
    kind = jf.kind()
    arch = dev.spec.cores.architecture
    plan = LaunchPlan(name, block_dim, kind, dev, options=dict(options), core_mask=core_mask)
    fn = jf.run_fn
    ckw = dict(call_kwargs)
    insert_sync = jf.inserts_sync()

    def program(role: str) -> Callable[..., Any]:
        def run(ctx: Any, *_gm_tensors: Any) -> Any:
            group = None
            if kind == "mix":
                from opsim.asc.adv import group_of
                group = group_of(plan, ctx, role)
            state = _core.BlockState(ctx, plan, role, group)
            if insert_sync:
                from opsim.asc.autosync import AutoSync
                state.autosync = AutoSync(state)
            if group is not None and role == "aiv":
                # when this vector core's kernel returns, its cube core stops waiting for it
                sub = ctx.sub_block_idx
                state.on_finish.append(lambda: group.mailbox.post(("exit", sub, None)))
            return _core.run_block(state, fn, call_args, ckw)
        run.__name__ = name
        return run

    if kind == "mix" and arch == "split":
        kernel: Any = MixKernel(aic=program("aic"), aiv=program("aiv"), name=name)
        unit = "mix"
    elif kind == "vector":
        kernel, unit = program("aiv" if arch == "split" else "aicore"), "vector"
    else:   # cube-only, or a mixed kernel on a part whose AI cores have every pipe
        kernel, unit = program("aic" if arch == "split" else "aicore"), "cube"
        if arch != "split":
            plan.kind = "cube"
    return dev.launch(stream, kernel, block_dim, *gm_tensors, unit=unit, core_mask=core_mask, name=name)


def launch(jf: JitFunction, block_dim: int, stream: Any, *args: Any, **kwargs: Any) -> KernelResult:
    """Run ``jf`` on ``block_dim`` blocks of a fresh simulated device; see the module docstring."""
    from opsim.api import collect_stats, device_spec, record_run_facts
    from opsim.simulator.profile import Profiler, launch_records

    jf.check_not_generator()
    params = inspect.signature(jf.fn).parameters
    opts = dict(jf.options)
    for k in _RESERVED:
        if k in kwargs and k not in params:
            opts[k] = kwargs.pop(k)
    spec = device_spec(opts.get("device") or _DEFAULT_DEVICE[0])
    if spec.family != "ascend":
        raise SimulatorError(f"opsim.asc kernels run on Ascend devices; {spec.name} is a {spec.family} device")
    name = jf.fn.__name__
    trace = _trace(opts.get("trace", "instruction"), spec, name)
    dev = Device(spec, trace=trace, functional=True, seed=int(opts.get("seed", 0)))
    try:
        # the profiler, as opsim.run has: the on-chip bytes of the statistics and the launch's
        # tables come from it
        profiler = Profiler()
        dev.observers.append(profiler)
        # the front-end stamps every instruction's origin itself: no need for the dispatcher's
        # generator-frame walk (device.source_lines)
        sim_stream = dev.create_stream()

        bound = inspect.signature(jf.fn).bind(*args, **kwargs)
        host: list[tuple[str, np.ndarray, int, int]] = []
        call_args: list[Any] = []
        call_kwargs: dict[str, Any] = {}
        placed: dict[tuple[int, int], int] = {}       # host memory -> device address (aliases share it)
        gm_tensors: list[Any] = []                     # the GM tensors, shaped as the host arrays
        for pname, value in bound.arguments.items():
            arr = _as_host_array(value)
            if arr is not None:
                if not arr.flags.c_contiguous:
                    raise ValueError(f"{name}: argument {pname} is not a contiguous array")
                dt = nx.dtype(arr.dtype)
                key = (arr.__array_interface__["data"][0], arr.nbytes)
                addr = placed.get(key)
                if addr is None:
                    addr = placed[key] = dev.malloc(arr.nbytes, name=pname)
                    dev.write(addr, arr)
                    host.append((pname, arr, addr, arr.nbytes))
                gm_tensors.append(SimGlobalTensor.contiguous(dev, addr, dt, arr.shape))
                if trace is not None:     # the run facts every exported trace carries (traces.schema)
                    trace.metadata["shapes"][pname] = list(arr.shape)
                    trace.metadata["dtypes"][pname] = dt.name
                value = GlobalAddress(dev, addr, dt, arr.size)
            if params[pname].kind == inspect.Parameter.KEYWORD_ONLY:
                call_kwargs[pname] = value
            elif params[pname].kind == inspect.Parameter.VAR_POSITIONAL:
                call_args.extend(value)
            else:
                call_args.append(value)

        san = _sanitizer(dev) if opts.get("sanitize") else None
        launched = launch_on(dev, sim_stream, jf, block_dim, tuple(call_args), call_kwargs, options=opts,
                             core_mask=opts.get("core_mask"), gm_tensors=tuple(gm_tensors))
        unit = launched.unit
        try:
            dev.synchronize(sim_stream)
        except SimulatorError as exc:
            name_kernel_line(exc)
            if san is not None:
                from opsim.api import attach_report
                attach_report(exc, san.finish())      # the fault is a finding too: exc.sanitizer
            cause = exc.__cause__
            if cause is not None and not isinstance(cause, SimulatorError) and "internal error" in str(exc):
                bug = cause.__cause__ or cause
                # SimPy re-raises copies: the note naming the kernel's line is on the first one
                note = chain_kernel_line_note(cause)
                if note is not None and _core.kernel_line_note(bug) is None:
                    bug.add_note(note)
                raise bug from None   # a bug in the kernel: its own exception
            raise
        report = san.finish() if san is not None else None

        outputs: dict[str, np.ndarray] = {}
        for pname, arr, addr, nbytes in host:
            data = dev.read(addr, nbytes)
            view = arr.reshape(-1).view(np.uint8)
            if not np.array_equal(view, data):
                view[...] = data                       # copied back in place
                outputs[pname] = arr
        stats = collect_stats(dev, [launched], None)
        stats["block_dim"] = block_dim
        stats["kernel_type"] = unit
        if report is not None:
            stats["sanitizer"] = report
        records = tuple(launch_records(dev, profiler))
        if trace is not None:
            # the bytes, launches and UB peaks the trace alone cannot give exactly (opsim.run's too)
            record_run_facts(trace, dev, stats, records)
        return KernelResult(name, spec.name, "full", outputs, stats["cycles"], stats["time_us"], stats, trace,
                            None, report, records)
    finally:
        dev.close()     # its host memory goes back now (Device.close)
