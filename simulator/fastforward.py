"""Exact steady-state fast-forward of the simulated machine.

Tiled kernels repeat: after a warm-up the whole machine (every core's pipes, queues, flags and
dispatcher, every transfer on the links) may be in the same state one round of tiles later, up
to a shift of time, of the GM addresses each core works on and of the tile index. From then on
the step-by-step run repeats that round, so the engine may jump over many rounds at once.

How (all in this module; core.py and device.py only call in):

* **Clean boundaries.** ``Device.synchronize`` steps SimPy itself and calls
  :meth:`FastForward.boundary` whenever every event of the current cycle has been processed.
  The only scheduled events are then timeouts (a pipe's instruction, the link network's
  wake-up), so the state is a set of plain Python objects.
* **Snapshots.** At the first clean boundary after the reference core (the launch's first
  core) starts a new tile (the tile of the newest instruction its dispatcher took, so a
  program read ahead by an earlier jump does not move it; or, for a kernel that stamps no
  tile, the stores its store pipe finished),
  :meth:`FastForward._global_state` writes the scheduled events and the link network (each
  transfer's remaining bytes, rate, rate class, the links' open segment and history tail) and,
  only when that part repeats, :meth:`FastForward._cores_state` writes every core: the stream
  index and signature (class, operands; GM slice positions kept apart) of every instruction the
  machine holds (up to the dispatcher's current draw: what an earlier jump read ahead is
  program, checked below, not state), the pipes' queues and in-flight instructions, flags,
  waiters, the dispatcher's blocked clock. All times are relative to now. Two snapshots one
  candidate period apart (``PERIODS``: 1 to 16 tiles; double buffering repeats every 2, and
  48 lockstep cores whose stores evict dirty L2 lines every 6) that are equal except for a
  per-core stream-index offset ``L`` and GM shift ``d`` prove the period.
* **Template.** Between the two snapshots the engine recorded the completions (time, core,
  pipe, stream index), the GM transfers with their L2 outcome (hit bytes, dirty bytes written
  back) and every counter.
* **Skip k rounds.** The program streams are read ahead ``k·L`` instructions; each must equal
  the instruction ``L`` before it with its GM position shifted by ``d`` and its tile by the
  period (else k stops there). The L2 accesses of the skipped rounds are applied in their
  recorded order and each outcome must equal the template's (else the L2 is restored and k
  stops at the last good round). Both advance a doubling number of rounds at a time, so
  neither runs far past the point where the other stops. The skipped instructions' address checks run, and in full
  mode their numeric effects are applied one by one in their completion order, the order of
  the step-by-step run (so no independence argument is needed). Observers that declare
  ``fast_forward_safe`` (the profiler) get their ``on_instruction`` calls in time order. Then
  time, the event queue, the link network, the counters and the link histories move on by k
  rounds, and every instruction the machine holds takes the fields of its counterpart ``k·L``
  later (:func:`_slots`).

Exact: cycles, per-pipe and per-core busy cycles, issue starvation, GM and link bytes, L2
counters, output bits and the observers' call stream equal the step-by-step run's. The link
history of a skipped round is a copy of the recorded round's, so statistics that integrate it
in floating point (``bandwidth_GBps``, a link's ``window_bytes``) can differ in the last bits
(about 1e-15 relative): the step-by-step run's float rounding depends on absolute byte counters
the jump does not replay.

Where the engine cannot prove the repetition it does not skip, and ``stats["fast_forward"]``
says why: a trace is recorded (every slice is kept), an observer is not ``fast_forward_safe``
(the sanitizer), more than one launch is in flight, an instruction outside the known set
(scalar programs, atomics, cube, sort, cross-core flags...), a strided or sampled GM transfer,
a kernel program that reads device data while it runs (embedding indices), or simply a machine
whose state never repeats: many cores whose rounds drift against each other through the shared
links and L2. The default 48-core plans of large element-wise calls do this unless each slice
starts on an L2 line (512 B; for fp32 MSE, elements a multiple of 48 x 128): a tile's first,
partial line was loaded by the previous tile, so it hits in the L2 (a faster path than HBM),
and how many bytes hit depends on the slice's offset within the line. Each core's round
then takes a persistently different number of cycles (MSE fp32 at 2^26/2^27: about 7,281 at
offset 0, 7,230 at 340 B, 7,179 at 168 B, with a few cycles between nearby offsets), their
relative phases slide by up to about 100 cycles a round, and the joint state did not repeat
at any lag within 450 rounds (instrumented 2^27 run).
"""
from __future__ import annotations

import heapq
from collections import deque
from heapq import heappop
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, Iterator

from simpy.core import StopSimulation

from opsim.simulator import simloop
from opsim.simulator.errors import SimulatorError
from opsim.simulator.links import _WakeUp

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.core import Core, Pipe
    from opsim.simulator.device import Device

# candidate periods, in tiles of the reference core (double buffering repeats every 2 tiles)
PERIODS = (1, 2, 3, 4, 6, 8, 12, 16)
# a skip is worth its bookkeeping only over at least this many rounds
MIN_ROUNDS = 2


class _Fault:
    """An error of the kernel program (it raised, or yielded something that is not an
    instruction): raised when the dispatcher gets there."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class ProgramStream:
    """A block's program as one numbered sequence of instructions.

    The queue helpers append flag instructions to ``pending`` while the kernel generator runs;
    they precede the next instruction it yields. The stream takes both in program order,
    stamps each with the core's tile (and source line, when the device records them) at the
    moment the generator produced it, which is what the dispatcher saw when it pushed it
    straight away, and numbers them. The fast-forward reads ahead with :meth:`draw`.
    On a device without the fast-forward nothing reads ahead or asks for the numbering, and
    iterating the stream hands out each draw as one batch instead (:meth:`_batches`): the
    same sequence at a Python call per draw rather than several per instruction.
    """

    def __init__(self, core: "Core", program: Iterator[Any], pending: list) -> None:
        self.core = core
        self.program = program
        self.pending = pending
        self.ready: deque = deque()       # drawn from the program, not yet given to the dispatcher
        self.count = 0                    # instructions drawn so far (the next one's index)
        self.given = 0                    # instructions given to the dispatcher
        self.done = False
        self.held: Any = None             # the instruction the dispatcher is pushing
        self.tile = -1                    # tile of the newest instruction given to the dispatcher
        # counts at the end of each draw not yet given in full (kept while the fast-forward
        # records): the first is the end of the dispatcher's current draw, see ``horizon``
        self.ends: deque = deque()
        self.reads_data = False           # the program read device memory while it ran
        self.index: dict[int, int] = {}   # id(instruction) -> stream index, while ff records
        self.by_index: dict[int, Any] = {}
        self.sigs: dict[int, Any] = {}    # id(instruction) -> _signature, computed once

    def __iter__(self) -> Iterator[Any]:
        if self.core.device.ff is None:
            # Nothing reads ahead or asks for the numbering: the dispatcher takes each draw
            # (its flags, then its instruction) as one batch through a C-level chain, which
            # costs no Python call per instruction (see _batches)
            return chain.from_iterable(self._batches())
        return self._given()

    def _given(self) -> Iterator[Any]:
        """What :meth:`__next__` gives, as a generator (the dispatcher's loop with the
        fast-forward on: a resumption per instruction instead of a method call)."""
        while True:
            ready = self.ready           # read each time: a jump replaces the deque
            if ready:
                instr = ready.popleft()
                if instr.__class__ is _Fault:
                    raise instr.error
                given = self.given = self.given + 1
                self.held = instr
                self.tile = instr.tile
                ends = self.ends
                while ends and ends[0] < given:
                    ends.popleft()
                yield instr
            elif not self._draw(False):
                return

    def _batches(self) -> Iterator[Any]:
        """The draws of :meth:`_draw`, each as the batch it adds, for a device without the
        fast-forward: the same instructions in the same order, stamped with the same tile and
        source line at the same moment (a draw is made when the dispatcher has taken the
        previous one), and a kernel's error raised when the dispatcher gets there. ``count``,
        ``given``, ``held``, ``tile`` and ``ready`` are the fast-forward's and stay unset."""
        if _ISA is None:
            _load_isa()
        Instruction = _ISA.Instruction
        core = self.core
        device = core.device
        pending = self.pending
        program = self.program
        known: set = set()                # classes that passed the isinstance check
        while True:
            device.drawing = self
            try:
                item = next(program)
            except StopIteration:
                item = None
                self.done = True
            except Exception:
                # the flags it queued are never pushed (as in _draw)
                self.done = True
                pending.clear()
                raise
            finally:
                device.drawing = None
            if item is None:
                if not pending:
                    if self.done:
                        return
                    continue                     # a bare ``yield`` (None) is skipped, as _draw does
                batch: Any = [*pending]
            else:
                cls = type(item)
                if cls not in known:
                    if not isinstance(item, Instruction):
                        self.done = True         # the program is not resumed after it
                        batch = [*pending]       # pushed unstamped, as _draw does
                        del pending[:]
                        yield batch
                        raise SimulatorError(f"kernel yielded {item!r}, which is not an instruction",
                                             core=core.name)
                    known.add(cls)
                if not pending and not device.source_lines:
                    # the instruction alone (no flags queued before it, no line to stamp): the
                    # stamping and the checks below in short (the program yielded: not done)
                    item.tile = core.tile
                    yield (item,)
                    continue
                batch = [*pending, item] if pending else (item,)
            del pending[:]                       # pending.clear(), without the call
            tile = core.tile
            if device.source_lines:
                origin = _source_line(program)
                for instr in batch:
                    instr.tile = tile
                    if origin is not None and getattr(instr, "origin", None) is None:
                        instr.origin = origin
            else:
                for instr in batch:
                    instr.tile = tile
            yield batch
            if self.done:
                return

    def __next__(self) -> Any:
        ready = self.ready
        while not ready:
            if not self._draw():
                raise StopIteration
        instr = ready.popleft()
        if isinstance(instr, _Fault):
            raise instr.error
        self.given += 1
        self.held = instr
        self.tile = instr.tile
        ends = self.ends
        while ends and ends[0] < self.given:
            ends.popleft()
        return instr

    @property
    def horizon(self) -> int:
        """Instructions drawn as the dispatcher alone would have drawn them: the end of the draw
        it is giving out. Beyond it, what :meth:`draw` read ahead (after a jump), which is
        program, not state: snapshots leave it out and the proof of a round checks it."""
        return self.ends[0] if self.ends else self.count

    def _draw(self, ahead: bool = True) -> bool:
        """Run the program to its next instruction; False once it has ended (pending flushed).

        ``ahead``: the draw reads ahead of the dispatcher (``draw``, or ``__next__``), so its end
        goes to ``ends``. The dispatcher draws (``_given``) only once it has taken everything
        drawn before, and the end of its own draw needs no entry: ``horizon`` is ``count`` while
        ``ends`` is empty, and :meth:`draw` notes it before it reads ahead."""
        if self.done:
            return False
        if _ISA is None:
            _load_isa()
        core = self.core
        pending = self.pending
        device = core.device
        device.drawing = self
        try:
            item = next(self.program)
        except StopIteration:
            self.done = True
            item = None
        except Exception as exc:
            # raised when the dispatcher reaches this point, as if the program had raised then
            # (the fast-forward may be reading ahead); the flags it queued are never pushed
            self.done = True
            pending.clear()
            self.ready.append(_Fault(exc))
            return True
        finally:
            device.drawing = None
        if item is None:
            new = [*pending]
        else:
            cls = item.__class__
            if cls not in _KNOWN:
                # (a module global, not an import per call: ~2 us each)
                if not isinstance(item, _ISA.Instruction):
                    self.done = True             # the program is not resumed after it
                    self._add([*pending])
                    pending.clear()
                    self.ready.append(_Fault(SimulatorError(
                        f"kernel yielded {item!r}, which is not an instruction", core=core.name)))
                    return True
                _KNOWN.add(cls)
            new = [*pending, item]
        del pending[:]                           # pending.clear(), without the call
        if new:
            tile = core.tile
            if device.source_lines:
                origin = _source_line(self.program)
                for instr in new:
                    instr.tile = tile
                    if origin is not None and getattr(instr, "origin", None) is None:
                        instr.origin = origin
            else:
                for instr in new:
                    instr.tile = tile
            if device.ff is None:
                self._add(new)
            else:
                # _add, inline: number them
                index, by_index = self.index, self.by_index
                n = self.count
                for instr in new:
                    index[id(instr)] = n
                    by_index[n] = instr
                    n += 1
                self.count = n
                self.ready.extend(new)
                if ahead:
                    self.ends.append(n)
        return True if not self.done or self.ready else False

    def _add(self, instrs: list) -> None:
        if self.core.device.ff is None:
            self.count += len(instrs)
            self.ready.extend(instrs)
            return
        if not instrs:
            return
        index, by_index = self.index, self.by_index
        n = self.count
        for instr in instrs:
            index[id(instr)] = n
            by_index[n] = instr
            n += 1
        self.count = n
        self.ready.extend(instrs)
        self.ends.append(n)

    def signature(self, instr: Any) -> tuple[tuple, tuple] | None:
        """:func:`_signature` of an instruction of this stream, computed once."""
        key = id(instr)
        sig = self.sigs.get(key)
        if sig is None:
            sig = self.sigs[key] = _signature(instr)
        return sig

    def draw(self) -> bool:
        """Run the program to its next instruction(s), kept ready in order; False at its end."""
        before = self.count
        if not self.ends and before:
            self.ends.append(before)     # the end of the dispatcher's draw (see _draw)
        while self.count == before:
            if not self._draw() or self.done:
                break
        return self.count > before


# ---------------------------------------------------------------------------------------------
# signatures: an instruction's static form, and the GM slice starts that shift between rounds
# ---------------------------------------------------------------------------------------------

def _local(t: Any) -> tuple:
    return ("L", id(t.region), t.addr, t.dtype.name, t.count)


_ISA: Any = None
# classes of drawn items that passed the isinstance check against Instruction (ProgramStream._draw)
_KNOWN: set[type] = set()


def _source_line(program: Any) -> str | None:
    """simulator.core.source_line (imported here only when the device records source lines)."""
    from opsim.simulator.core import source_line
    return source_line(program)


def _load_isa() -> None:
    """Set ``_ISA`` to simulator.isa (imported on first use: isa imports core, which imports us)."""
    global _ISA
    from opsim.simulator import isa as _isa_module
    _ISA = _isa_module


def _signature(instr: Any) -> tuple[tuple, tuple] | None:
    """(static part, GM starts) of an instruction the fast-forward knows; None otherwise."""
    if _ISA is None:
        _load_isa()
    isa = _ISA
    cls = type(instr)
    if cls in (isa.SetFlag, isa.QueueFreeFlag, isa.WaitFlag):
        return (cls, instr.src, instr.dst, instr.event_id), ()
    if cls in (isa.DataCopy, isa.DataCopyPad):
        g = instr.glob
        t = g.tensor
        if t.is_contiguous:
            # a contiguous slice is its first byte (views of one buffer may be new objects)
            where: tuple = ("contiguous", t.dtype.name, g.count)
            start = g.byte_range(instr.count)[0]
        else:
            where, start = ("view", id(t), g.count), g.start
        return ((cls, instr._to_gm, instr.count, instr._pipe, instr._nbytes, instr._atomic,
                 _local(instr.local), where), (start,))
    if isinstance(instr, isa.Cast):
        return (cls, _local(instr.dst), _local(instr.src), instr.mode, instr.count), ()
    if isinstance(instr, isa.VectorOp):
        scalar = instr.scalar
        if isinstance(scalar, isa.LocalTensor):
            # read from local memory when it executes: the data differ, the timing does not, and
            # the skipped rounds execute in the step-by-step order
            scalar = ("scalar", _local(scalar))
        elif scalar is not None and not isinstance(scalar, (int, float)):
            return None
        src = (_local(instr.src),) if isinstance(instr, isa.Copy) else ()
        return ((cls, _local(instr.dst), tuple(_local(s) for s in instr.srcs), scalar, instr.count, src), ())
    return None


def _slots(instr: Any) -> dict[str, Any]:
    """An instruction's fields (operands, tile, origin): what a held instruction takes from its
    counterpart k rounds on when the machine jumps."""
    return {slot: getattr(instr, slot) for klass in type(instr).__mro__
            for slot in getattr(klass, "__slots__", ()) if hasattr(instr, slot)}


# ---------------------------------------------------------------------------------------------
# the controller
# ---------------------------------------------------------------------------------------------

class FastForward:
    """Detects a repeating round of the whole machine and skips whole rounds (module docstring)."""

    def __init__(self, device: "Device") -> None:
        self.device = device
        self.rounds = 0              # rounds skipped so far
        self.cycles = 0              # simulated cycles skipped
        self.instructions = 0        # busy instructions completed inside skipped rounds (flags not counted)
        self.skips = 0               # jumps made
        self.periods: set[int] = set()   # the periods (in reference tiles) of the jumps made
        self._compared = 0           # snapshots compared with the last PERIODS tiles' ones
        self._glob_repeats = 0       # ... whose events and links repeated one of them
        self.reason = ""             # why it did not skip (the last reason seen)
        self._log: list[tuple] = []  # (kind, ...) since the oldest full snapshot
        # the log is kept only while a full snapshot (cores included) is held: a proof starts
        # from one, and a machine that never repeats takes none (nothing to record then)
        self._recording = False
        self._snaps: dict[int, tuple] = {}
        self._launch: Any = None
        self._cores: list["Core"] = []
        self._every_core: list["Core"] | None = None
        self.streams = 0             # cores whose dispatcher has a ProgramStream (Core.dispatch counts)
        self._owner: dict[int, tuple[int, str]] = {}   # id(pipe process) -> (core, pipe)
        self._ref_tile: int | None = None
        self._l2_saved: tuple | None = None
        self._quiet_until = -1       # a failed proof of period p is not retried before this tile
        self._dtile: list[int] = []  # per core: tile shift of one round (from the last proof)

    # -- what the run reports -------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        return {"enabled": True, "skipped_rounds": self.rounds, "skipped_cycles": self.cycles,
                "skipped_instructions": self.instructions, "jumps": self.skips,
                "period_tiles": sorted(self.periods),
                "reason": "" if self.rounds else self._why()}

    def _why(self) -> str:
        if self._compared and not self._glob_repeats and (
                not self.reason or self.reason.startswith("a core outside the repeating set")):
            # the last reason seen is then only the run's tail (cores finishing at different times)
            return (f"the machine's state never repeated: at {self._compared} tile boundaries the events and "
                    f"links differed from those {', '.join(map(str, PERIODS))} tiles earlier")
        return self.reason or "the machine's state never repeated one round later"

    # -- recording (hooks) ---------------------------------------------------------------------
    def on_complete(self, pipe: "Pipe", instr: Any, start: int, end: int) -> None:
        # (Pipe._run does the case of a stream with no signatures, not recording, inline)
        stream = pipe.core.stream
        idx = -1
        if stream is not None:
            key = id(instr)
            idx = stream.index.pop(key, -1)
            sigs = stream.sigs
            if sigs:                     # (filled only by snapshots)
                sigs.pop(key, None)
            if not self._recording:
                # a proof looks back only from a full snapshot on, which holds live instructions
                stream.by_index.pop(idx, None)
        if self._recording:
            # no reference to the instruction: the log spans rounds, and keeping every completed
            # instruction alive made the collector's passes longer
            self._log.append(("c", pipe, idx, start, end))

    def on_gm(self, pipe: "Pipe", addr: int, nbytes: int, write: bool, plain: bool,
              hit: int, wb: int) -> None:
        if self._recording:
            instr = pipe.current
            stream = pipe.core.stream
            idx = stream.index.get(id(instr), -1) if stream is not None else -1
            self._log.append(("g", pipe, idx, addr, nbytes, write, plain, hit, wb))

    # -- eligibility ------------------------------------------------------------------------------
    def _eligible(self) -> bool:
        dev = self.device
        if dev.trace is not None and dev.trace.enabled:
            self.reason = "a trace is recorded (every slice is kept)"
            return False
        for ob in dev.observers:
            if not getattr(ob, "fast_forward_safe", False):
                self.reason = f"observer {type(ob).__name__} needs every instruction as it runs"
                return False
        running = [launch for launch in dev.launches if launch.start >= 0 and launch.end < 0]
        if len(running) != 1:
            self.reason = "no single launch in flight" if running else self.reason
            return False
        launch = running[0]
        if launch.unit == "mix" or launch.l2_sample is not None:
            self.reason = "mixed AIC/AIV launch or L2 sampling"
            return False
        if launch is not self._launch:
            self._launch = launch
            self._reset()
            self._cores = [c for c in self._all_cores() if c.launch is launch and c.stream is not None]
            self._owner = {id(p.proc): (i, name) for i, c in enumerate(self._cores)
                           for name, p in c.pipes.items()}
        # (no core has a stream in a launch's tail, its pipes draining: a boundary each cycle)
        cores = [c for c in self._all_cores() if c.launch is launch and c.stream is not None] if self.streams else []
        if cores != self._cores or not cores:
            self._cores = cores
            self._owner = {id(p.proc): (i, name) for i, c in enumerate(cores) for name, p in c.pipes.items()}
            self._reset()
            return False
        if dev.atomics.pending:
            self.reason = "atomic commits pending"
            return False
        return True

    def _all_cores(self) -> list["Core"]:
        """The device's cores (made once: a device's cores are fixed when it is built, after
        its FastForward)."""
        if self._every_core is None:
            self._every_core = self.device.all_cores()
        return self._every_core

    def _reset(self) -> None:
        self._snaps.clear()
        self._recording = False
        self._log.clear()
        self._ref_tile = None

    # -- the boundary hook ------------------------------------------------------------------------
    def run(self, until: Any) -> None:
        """``env.run(until=until)`` for an event ``until``, stepping SimPy here so that the
        fast-forward sees each clean boundary: the moment every event of the current cycle has
        been processed (Device._run_fast_forward). ``Environment.step`` is inline (the same
        work, a Python call fewer per event), as is the test by which :meth:`boundary` returns
        straight away while the reference core is in the tile it last looked at."""
        env = self.device.env
        step = env.step if simloop.step_is_wrapped(env) else None   # (simulator/simloop.py)
        while until.callbacks is not None:          # not yet processed
            queue = env._queue                      # (a jump replaces the list)
            if not queue:
                raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}')
            if queue[0][0] > env._now:
                cores = self._cores
                ref = cores[0] if cores else None
                stream = None if ref is None else ref.stream
                if stream is None or ref.tile < 0 or stream.tile != self._ref_tile:   # type: ignore[union-attr]
                    self.boundary()
                    queue = env._queue
            if step is not None:
                step()
                continue
            # Environment.step
            env._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None   # type: ignore[assignment]
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                simloop.resume_later(env, event, callbacks, callback)    # as step does
                raise
            if not event._ok and not hasattr(event, "_defused"):
                raise simloop.failure(event)        # crash, as step does

    def boundary(self) -> None:
        """Called at each clean boundary (every event of this cycle processed)."""
        cores = self._cores
        if cores and cores[0].stream is not None and self._marker() == self._ref_tile:
            return
        if not self._eligible():
            return
        tile = self._marker()
        if tile == self._ref_tile:
            return
        self._ref_tile = tile
        glob = self._global_state()
        if glob is None:
            self._snaps.clear()      # a gap: the next proof starts from the next snapshots
            self._log.clear()
            self._recording = False
            return
        now = self.device.env.now
        # the cores' part (the costly one) only when the global part repeats one of the last
        # periods; a proof then compares two full snapshots, one period later
        cands = [p for p in PERIODS if (old := self._snaps.get(tile - p)) is not None and old[1][0] == glob]
        if self._snaps:
            self._compared += 1
            self._glob_repeats += bool(cands)
        cores_part = self._cores_state() if cands else None
        if cands and cores_part is None:
            self._snaps.clear()
            self._log.clear()
            self._recording = False
            return
        snap = (glob, cores_part)
        # the counters only of a snapshot a proof can start from (one with the cores' part)
        self._snaps[tile] = (now, snap, len(self._log), None if cores_part is None else self._counters())
        if cores_part is not None:
            self._recording = True
        if tile < self._quiet_until:
            self._trim(tile)
            return
        for p in cands:
            old = self._snaps[tile - p]
            if old[1][1] is None:
                continue
            shift = _match(old[1], snap)
            if shift is None:
                continue
            k = self._skip(old, (now, snap, len(self._log), self._counters()), shift, p)
            if k:
                self._reset()
                return
            self._quiet_until = tile + p   # outcomes differ ahead: step at least one period on
            break
        self._trim(tile)

    def _marker(self) -> int:
        """Where the reference core is in its program: the tile its kernel stamps, or (a kernel
        that stamps none, e.g. a user's opsim.asc kernel) the stores its store pipe finished."""
        ref = self._cores[0]
        if ref.tile >= 0:
            # the dispatcher's tile, not the program's: after a jump the program has been read
            # ahead (ProgramStream.draw), and its tile is that of the newest instruction drawn
            return ref.stream.tile if ref.stream is not None else ref.tile
        return ref.pipes[ref.store_pipe].instructions if ref.store_pipe in ref.pipes else -1

    def _trim(self, tile: int) -> None:
        keep = tile - max(PERIODS)
        for t in [t for t in self._snaps if t < keep]:
            del self._snaps[t]
        self._recording = any(s[1][1] is not None for s in self._snaps.values())
        if not self._recording:
            self._log.clear()
        if self._snaps:
            full = [s[1][1] for _, s in sorted(self._snaps.items()) if s[1][1] is not None]
            for i, c in enumerate(self._cores):
                # a proof looks back no further than the oldest full snapshot's held instructions;
                # without one, than the oldest instruction the machine still holds
                keep = full[0][i][1] if full else min(c.stream.index.values(), default=c.stream.count)
                by = c.stream.by_index
                if len(by) > 2 * (c.stream.count - keep) + 64:
                    for m in [m for m in by if m < keep]:
                        del by[m]
            first = min(s[2] for s in self._snaps.values())
            if first > 4096:
                del self._log[:first]
                self._snaps = {t: (s[0], s[1], s[2] - first, s[3]) for t, s in self._snaps.items()}

    # -- counters that add up over a round --------------------------------------------------------
    def _counters(self) -> dict[str, Any]:
        dev = self.device
        out: dict[str, Any] = {"bytes_read": dev.bytes_read, "bytes_written": dev.bytes_written,
                               "link_bytes": dict(dev.link_bytes),
                               "launch_link_bytes": dict(self._launch.link_bytes),
                               "completed": dev.net.completed, "recomputes": dev.net.recompute_count,
                               "seq": dev.net._seq, "rank": dev.net._rank}
        for c in self._cores:
            out[c.name] = (c._blocked_acc, dict(c.issue_starved),
                           {n: (p.busy_cycles, p.instructions, p.idle_mark) for n, p in c.pipes.items()},
                           c.stream.horizon)
        for name, link in dev.net.links.items():
            out["link " + name] = (link.bytes_carried, len(link._times), link._end,
                                   link._bytes[-1] if link._bytes else None)
        for name, pool in dev.net.pools.items():
            out["pool " + name] = pool.bytes_carried
        if dev.l2 is not None:
            l2 = dev.l2
            out["l2"] = (l2.hit_bytes, l2.miss_bytes, l2.writeback_bytes)
        return out

    # -- snapshot ---------------------------------------------------------------------------------
    def _global_state(self) -> tuple | None:
        """The scheduled events and the link network, relative to now (None: an event the
        fast-forward does not model). Cheap next to the cores' part, so it is compared first."""
        dev = self.device
        env = dev.env
        now = int(env.now)
        owner = self._owner
        net = dev.net
        queue = []
        for t, prio, _eid, ev in sorted(env._queue):
            cbs = ev.callbacks or []
            who: tuple | None = None
            if len(cbs) == 1:
                cb = cbs[0]
                proc = getattr(cb, "__self__", None)
                if proc is not None and id(proc) in owner:
                    who = ("pipe", owner[id(proc)])
                elif type(ev) is _WakeUp:
                    if ev.gen != net._gen:
                        continue                      # superseded wake-up: a no-op when it fires
                    who = ("net",)
            if who is None:
                self.reason = ("a core outside the repeating set is still working, or an event the "
                               "fast-forward does not model is scheduled")
                return None
            queue.append((t - now, prio, who))
        return (tuple(queue), self._net_state(now))

    def _cores_state(self) -> tuple | None:
        """Every core's part of the snapshot (None: a state the fast-forward does not model)."""
        now = int(self.device.env.now)
        per_core = []
        for c in self._cores:
            state = self._core_state(c, now)
            if state is None:
                return None
            per_core.append(state)
        return tuple(per_core)

    def _core_state(self, c: "Core", now: int) -> tuple | None:
        """One core's part of the snapshot: (state, stream base, GM starts, tile, drawn, idle
        marks, blocked clock)."""
        stream = c.stream
        if c.atomic is not None:
            self.reason = "SetAtomicAdd in effect"
            return None
        if stream.reads_data:
            self.reason = f"{c.name}'s program reads device data while it runs (data-dependent)"
            return None
        held: list[tuple[int, Any, tuple]] = []     # (stream index, instruction, static signature)

        def note(instr: Any) -> int | None:
            idx = stream.index.get(id(instr))
            sig = stream.signature(instr)
            if idx is None or sig is None:
                self.reason = f"{type(instr).__name__} is not an instruction the fast-forward models"
                return None
            held.append((idx, instr, sig[0]))
            return idx

        pipes = []
        marks: list[float | None] = []
        for name, p in c.pipes.items():
            noted = [note(instr) for instr in p.queue]
            q = [i for i in noted if i is not None]
            cur = p.current
            run: tuple = () if cur is None else (note(cur), p._waiting is not None)
            if len(q) != len(noted) or (run and run[0] is None):
                return None
            pipes.append((name, q, run, p.held, p.head_pending, p.idle_mark is None,
                          p._item_ev is not None, p._space_ev is not None, p.head_paid))
            marks.append(p.idle_mark)
        hi = None if stream.held is None else note(stream.held)
        if stream.held is not None and hi is None:
            return None
        nat = stream.horizon
        ready = list(islice(stream.ready, max(0, nat - stream.given)))
        if None in [note(instr) for instr in ready]:
            return None
        base = min(i for i, _, _ in held) if held else nat
        held.sort(key=lambda h: h[0])
        gm = tuple(st for _, instr, _ in held for st in stream.signature(instr)[1])
        rel = [(name, tuple(i - base for i in q), (run[0] - base, run[1]) if run else run, *rest)
               for name, q, run, *rest in pipes]
        state = (tuple(i - base for i, _, _ in held), tuple(sig for _, _, sig in held),
                 None if hi is None else hi - base, len(ready), stream.done and nat == stream.count, nat - base,
                 tuple(rel), tuple(sorted((k, v) for k, v in c.flags.items() if v)),
                 tuple(sorted(c.flag_waiters)),
                 None if c.blocked_since is None else now - c.blocked_since)
        return (state, base, gm, c.tile, nat, tuple(marks), c._blocked_acc)

    def _net_state(self, now: int) -> tuple:
        net = self.device.net
        seq0 = net._seq
        pending = tuple((t.start - now, t.issue - now, t.nbytes, _key(t.key), t.tag, seq0 - t.seq)
                        for _, _, t in sorted(net._pending, key=lambda e: (e[0], e[1])))
        classes = []
        for c in net._classes.values():
            members = tuple((k - c.served, seq0 - t.seq, t.tag, t.nbytes, t.issue - now, t.start - now,
                             net._rank - t.rank, t.threshold - c.served)
                            for k, _, t in c.heap)
            order = tuple(seq0 - t.seq for t in c.order if not t.done)
            classes.append((_key((c.base, c.pool, c.links)), c.n, c.rate, c.demand, members, order))
        links = []
        for name, link in net.links.items():
            tail = (link._times[-1] - now, link._bytes[-1], link._end - now) if link._times else None
            links.append((name, link._alloc, link.rate, link.active,
                          None if link._open_start is None else link._open_start - now,
                          link._open_bytes, tail, link in net._busy))
        pools = tuple((name, p._alloc, p.active, p in net._busy_pools) for name, p in net.pools.items())
        return (pending, tuple(classes), tuple(links), pools,
                None if net._wake_at is None else net._wake_at - now, net._last - now)

    # -- the jump -----------------------------------------------------------------------------------
    def _skip(self, old: tuple, new: tuple, shift: dict[int, tuple[int, int | None]], ptiles: int) -> int:
        """Skip as many rounds as can be proven (0 if none); returns the rounds skipped."""
        t0, _, log0, c0 = old
        t1, _, log1, c1 = new
        period = t1 - t0
        if period <= 0:
            return 0
        log = self._log[log0:log1]
        cores = self._cores
        cidx = {id(c): i for i, c in enumerate(cores)}
        # per core: stream-index offset L, GM start shift d
        L = [shift[i][0] for i in range(len(cores))]
        D: list[int | None] = [shift[i][1] for i in range(len(cores))]
        if any(n <= 0 for n in L):
            return 0
        completions = [e for e in log if e[0] == "c"]
        gms = [e for e in log if e[0] == "g"]
        per_core_done = [0] * len(cores)
        for e in completions:
            per_core_done[cidx[id(e[1].core)]] += 1
            if e[2] < 0:
                self.reason = "a completed instruction has no stream index"
                return 0
        if per_core_done != L:
            self.reason = "a round completes a different number of instructions than it draws"
            return 0
        if any(not e[6] for e in gms):
            self.reason = "a strided or sampled GM transfer"
            return 0
        if any(e[2] < 0 for e in gms):
            self.reason = "a GM transfer of an instruction the program stream does not know"
            return 0
        # how many rounds: bounded by each program's remaining instructions (drawn ahead, checked)
        if any(c.stream.done and not c.stream.ready for c in cores):
            return 0
        # how many rounds: the programs (read ahead and checked) and the L2 outcomes (applied in
        # recorded order, each must repeat), a doubling number of rounds at a time so that
        # neither is checked far beyond where the other stops
        progress: list[list] = [[0, D[i], None] for i in range(len(cores))]
        self._l2_saved = None
        k, want = 0, 8
        while True:
            kp = self._rounds_available(L, progress, want)
            k2 = self._apply_l2(gms, L, cidx, k, kp) if kp > k else k
            if k2 < kp or kp < want:
                k = k2
                break
            k, want = kp, 2 * want
        if k < MIN_ROUNDS:
            self._l2_restore()
            if not self.reason:
                self.reason = ("the L2 outcome of an access differs in the rounds ahead" if k2 < kp
                               else "too few rounds left")
            return 0
        D[:] = [d for _, d, _ in progress]
        self._dtile = [dt or 0 for _, _, dt in progress]
        self._l2_saved = None
        self._apply_instructions(completions, L, cidx, k, period)
        self._shift(k, period, c0, c1, L)
        self.rounds += k
        self.cycles += k * period
        self.instructions += k * sum(b[1] - c0[c.name][2][n][1] for c in cores for n, b in c1[c.name][2].items())
        self.skips += 1
        self.periods.add(ptiles)
        return k

    def _rounds_available(self, L: list[int], progress: list[list], limit: int) -> int:
        """Rounds (up to ``limit``) whose instructions the programs produce, each the one L
        before shifted by d. ``progress`` holds per core [rounds checked, GM shift, tile shift]
        and carries over between calls of one proof, so each round is checked once."""
        k = limit
        for i, c in enumerate(self._cores):
            stream = c.stream
            by = stream.by_index
            top = stream.horizon - 1          # the newest instruction the snapshot holds
            state = progress[i]
            j = state[0]
            dh = [state[1], state[2]]
            while j < k:
                # round j+1 needs instructions up to top + (j+1)*L drawn and checked
                want = top + (j + 1) * L[i]
                ok = True
                while stream.count <= want:
                    if not stream.draw():
                        ok = False
                        break
                if not ok:
                    break
                for m in range(top + j * L[i] + 1, want + 1):
                    a, b = by.get(m - L[i]), by.get(m)
                    if a is None or b is None or not _same_shifted(stream, a, b, dh):
                        ok = False
                        break
                if not ok:
                    break
                j += 1
            state[:] = [j, dh[0], dh[1]]
            k = min(k, j)
            if k == 0:
                self.reason = f"{c.name}'s program does not repeat ahead"
                return 0
        # the rounds ahead must not reach the drawn instructions of a shorter last round: the
        # instructions the machine holds after the jump (top + k*L) were checked above
        return k

    # -- L2 ---------------------------------------------------------------------------------------
    def _apply_l2(self, gms: list[tuple], L: list[int], cidx: dict[int, int], start: int, end: int) -> int:
        """Apply the L2 accesses of rounds [start, end); returns the end of the rounds whose
        outcomes all equal the template's (the L2 is then as after them)."""
        l2 = self.device.l2
        if l2 is None or not gms:
            return end
        if self._l2_saved is None:
            self._l2_saved = l2.save_state()
        for j in range(start, end):
            for e in gms:
                _, pipe, idx, addr, nbytes, write, _, hit, wb = e
                c = pipe.core
                instr = c.stream.by_index[idx + (j + 1) * L[cidx[id(c)]]]
                lo, hi = instr.glob.byte_range(instr.count)
                n = min(instr._nbytes, hi - lo)
                if n != nbytes:
                    return self._l2_redo(gms, L, cidx, j)
                h = l2.access_runs(((lo, n),), write=write)
                w = l2.take_writeback()
                if h != hit or w != wb:
                    return self._l2_redo(gms, L, cidx, j)
        return end

    def _l2_redo(self, gms: list[tuple], L: list[int], cidx: dict[int, int], good: int) -> int:
        """Restore the L2 and re-apply the ``good`` rounds whose outcomes matched."""
        l2 = self.device.l2
        assert l2 is not None and self._l2_saved is not None
        l2.restore_state(self._l2_saved)
        if good < MIN_ROUNDS:
            return good
        for j in range(good):
            for e in gms:
                _, pipe, idx, _, _, write, _, _, _ = e
                c = pipe.core
                instr = c.stream.by_index[idx + (j + 1) * L[cidx[id(c)]]]
                lo, hi = instr.glob.byte_range(instr.count)
                l2.access_runs(((lo, min(instr._nbytes, hi - lo)),), write=write)
                l2.take_writeback()
        return good

    def _l2_restore(self) -> None:
        l2 = self.device.l2
        if l2 is not None and self._l2_saved is not None:
            l2.restore_state(self._l2_saved)
            self._l2_saved = None

    # -- instructions of the skipped rounds ---------------------------------------------------------
    def _apply_instructions(self, completions: list[tuple], L: list[int], cidx: dict[int, int],
                            k: int, period: int) -> None:
        """Checks and numerics of the skipped instructions, in completion order; observers."""
        from opsim.simulator import isa
        dev = self.device
        functional = dev.functional
        observers = dev.observers
        for j in range(k):
            dt = (j + 1) * period
            for e in completions:
                _, pipe, idx, start, end = e
                c = pipe.core
                instr = c.stream.by_index[idx + (j + 1) * L[cidx[id(c)]]]
                if isinstance(instr, isa.DataCopy):
                    instr.local.check(instr.count, write=not instr._to_gm)
                    instr.glob.check(instr.count, write=instr._to_gm)
                    if functional:
                        instr.complete(pipe)
                elif instr.busy:
                    instr.issue(pipe)                   # operand checks; no side effect here
                    if functional:
                        instr.complete(pipe)
                busy = instr.busy
                for ob in observers:
                    if busy or not getattr(ob, "busy_only", False):
                        ob.on_instruction(c, pipe, instr, start + dt, end + dt)

    # -- shifting the machine by k rounds -------------------------------------------------------------
    def _shift(self, k: int, period: int, c0: dict, c1: dict, L: list[int]) -> None:
        dev = self.device
        env = dev.env
        delta = k * period
        # 1. every instruction the machine holds (drawn before the jump) becomes its counterpart
        #    k rounds on; the stream resumes after the newest of them, and what was drawn beyond
        #    it (reading ahead) stays ready in order
        for i, c in enumerate(self._cores):
            stream = c.stream
            count_t = c1[c.name][3]           # instructions drawn at the boundary
            held = [stream.held] if stream.held is not None else []
            for p in c.pipes.values():
                held.extend(p.queue)
                if p.current is not None:
                    held.append(p.current)
            held.extend(x for x in stream.ready if not isinstance(x, _Fault)
                        and stream.index.get(id(x), count_t) < count_t)
            off = k * L[i]
            by = stream.by_index
            index: dict[int, int] = {}
            # read every counterpart before changing any: a counterpart may itself be held
            moves = [(instr, stream.index[id(instr)] + off) for instr in held]
            contents = [_slots(by[m]) for _, m in moves]
            for (instr, m), values in zip(moves, contents):
                for slot, value in values.items():
                    setattr(instr, slot, value)
                index[id(instr)] = m
            ready_t = [x for x in stream.ready if not isinstance(x, _Fault)
                       and stream.index.get(id(x), count_t) < count_t]
            rest = [by[m] for m in range(count_t + off, stream.count)]
            for m, x in enumerate(rest, count_t + off):
                index[id(x)] = m
            faults = [x for x in stream.ready if isinstance(x, _Fault)]
            stream.ready = deque(ready_t + rest + faults)
            stream.given += off
            stream.ends = deque([count_t + off] + [e for e in stream.ends if e > count_t + off])
            stream.tile += k * self._dtile[i]
            stream.index = index
            stream.by_index = {m: x for x in held + rest for m in (index[id(x)],)}
            stream.sigs = {}               # the held instructions changed operands
        # 2. time: the event queue, the network, the cores
        q = env._queue
        env._queue = [(t + delta, prio, eid, ev) for t, prio, eid, ev in q]
        heapq.heapify(env._queue)
        env._now += delta
        net = dev.net
        net._last += delta
        if net._wake_at is not None:
            net._wake_at += delta
        net._pending = [(s + delta, seq, t) for s, seq, t in net._pending]
        heapq.heapify(net._pending)
        for t in list(net._active.values()) + [e[2] for e in net._pending]:
            t.issue += delta
            t.start += delta
        net.completed += k * (c1["completed"] - c0["completed"])
        net.recompute_count += k * (c1["recomputes"] - c0["recomputes"])
        for name, link in net.links.items():
            b0, n0, e0, last0 = c0["link " + name]
            b1, n1, e1, last1 = c1["link " + name]
            times = link._times[n0:n1]
            nbytes = link._bytes[n0:n1]
            mod = link._bytes[n0 - 1] if n0 and n1 > n0 else None
            for j in range(k):
                dt = (j + 1) * period
                if n1 > n0:
                    if mod is not None:
                        link._bytes[-1] = mod
                    link._times.extend(x + dt for x in times)
                    link._bytes.extend(nbytes)
                elif n0 and last1 is not None:
                    link._bytes[-1] = last1
                link.bytes_carried += b1 - b0
            link._end = link._end + delta if link._times else link._end
            if link._open_start is not None:
                link._open_start += delta
        for name, pool in net.pools.items():
            pool.bytes_carried += k * (c1["pool " + name] - c0["pool " + name])
        for c in self._cores:
            acc0, st0, pipes0, _ = c0[c.name]
            acc1, st1, pipes1, _ = c1[c.name]
            dacc = k * (acc1 - acc0)
            c._blocked_acc += dacc
            if c.blocked_since is not None:
                c.blocked_since += delta
            for name, v in st1.items():
                c.issue_starved[name] = c.issue_starved.get(name, 0) + k * (v - st0.get(name, 0))
            for name, p in c.pipes.items():
                if p.current is not None:
                    p.started += delta
                p.busy_cycles += k * (pipes1[name][0] - pipes0[name][0])
                p.instructions += k * (pipes1[name][1] - pipes0[name][1])
                if p.idle_mark is not None and p.idle_mark != pipes0[name][2]:
                    p.idle_mark += dacc
        # 3. counters of the device and the launch
        dev.bytes_read += k * (c1["bytes_read"] - c0["bytes_read"])
        dev.bytes_written += k * (c1["bytes_written"] - c0["bytes_written"])
        for key, v in c1["link_bytes"].items():
            d = v - c0["link_bytes"].get(key, 0)
            if d:
                dev.link_bytes[key] = dev.link_bytes.get(key, 0) + k * d
        launch = self._launch
        for key, v in c1["launch_link_bytes"].items():
            d = v - c0["launch_link_bytes"].get(key, 0)
            if d:
                launch.link_bytes[key] = launch.link_bytes.get(key, 0) + k * d
        if dev.l2 is not None:
            h0, m0, _ = c0["l2"]
            h1, m1, _ = c1["l2"]
            dev.l2.count(k * (h1 - h0), k * (m1 - m0))


def _key(key: tuple) -> tuple:
    base, pool, links = key
    return (base, None if pool is None else pool.name, tuple(link.name for link in links))


def _same_shifted(stream: ProgramStream, a: Any, b: Any, d: list) -> bool:
    """``b`` is ``a`` one round on: the same static form, GM starts + d[0], tile + d[1].
    ``d`` holds the core's GM start shift and tile shift, each learnt from the first pair if None."""
    sa, sb = stream.signature(a), stream.signature(b)
    if sa is None or sb is None or sa[0] != sb[0]:
        return False
    for x, y in zip(sa[1], sb[1]):
        if d[0] is None:
            d[0] = y - x
        if y - x != d[0]:
            return False
    if d[1] is None:
        d[1] = b.tile - a.tile
    return b.tile - a.tile == d[1] and getattr(a, "origin", None) == getattr(b, "origin", None)


def _match(a: tuple, b: tuple) -> dict[int, tuple[int, int | None]] | None:
    """Per core (stream-index offset, GM start shift) if snapshot ``b`` is ``a`` one round on."""
    glob_a, cores_a = a
    glob_b, cores_b = b
    if glob_a != glob_b or cores_a is None or cores_b is None or len(cores_a) != len(cores_b):
        return None
    out = {}
    for i, (ca, cb) in enumerate(zip(cores_a, cores_b)):
        state_a, base_a, gm_a, tile_a, _, marks_a, acc_a = ca
        state_b, base_b, gm_b, tile_b, _, marks_b, acc_b = cb
        if state_a != state_b or len(gm_a) != len(gm_b):
            return None
        # a pipe idle all round keeps its mark; one that went idle again has it as far behind
        # the dispatcher's blocked clock as before (Core.dispatch turns the gap into ``held``)
        for ma, mb in zip(marks_a, marks_b):
            if ma != mb and (ma is None or mb is None or ma - acc_a != mb - acc_b):
                return None
        shifts = {y - x for x, y in zip(gm_a, gm_b)}
        if len(shifts) > 1:
            return None
        out[i] = (base_b - base_a, shifts.pop() if shifts else None)
    return out
