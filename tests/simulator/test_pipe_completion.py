"""What a pipe does for each instruction it completes (simulator/core.py Pipe._run, Core.record):
observers see every completion in simulated-time order, except that an observer with
``busy_only = True`` (the profiler) is not shown flags and other non-busy instructions; and an
instruction class's base-class no-op issue/complete is known per class, so the pipe can skip it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opsim
from opsim import api
from opsim.simulator import isa
from opsim.simulator.profile import Profiler


class Calls:
    """An observer that keeps every call it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, bool, int, int]] = []

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        self.calls.append((core.name, pipe.name, instr.name, instr.busy, start, end))


class BusyCalls(Calls):
    busy_only = True


class JoinsLate(Calls):
    """Appends ``late`` to the device's observers at its first call (during the run)."""

    def __init__(self, device_observers: list, late: Calls) -> None:
        super().__init__()
        self.observers, self.late = device_observers, late

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        if not self.calls:
            self.observers.append(self.late)
        super().on_instruction(core, pipe, instr, start, end)


def _run(monkeypatch: pytest.MonkeyPatch, trace: str, make: Any) -> None:
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(5000).astype(np.float32) for _ in range(2))
    real = api.Device

    def device(*a: Any, **kw: Any) -> Any:
        dev = real(*a, **kw)
        make(dev)
        return dev

    with monkeypatch.context() as m:
        m.setattr(api, "Device", device)
        opsim.run("mse_loss_backward", device="atlas-a2", grad_output=np.float32(1.0), self=x, target=y,
                  reduction="none", trace=trace)


@pytest.mark.parametrize("trace", ["off", "instruction"])
def test_busy_only_observer_sees_the_busy_completions_of_a_plain_one(monkeypatch: pytest.MonkeyPatch,
                                                                      trace: str) -> None:
    plain, busy = Calls(), BusyCalls()
    _run(monkeypatch, trace, lambda dev: dev.observers.extend([plain, busy]))
    names = {c[2] for c in plain.calls}
    assert {"SET_FLAG", "WAIT_FLAG"} <= names           # flags are completions too
    assert any(not c[3] for c in plain.calls)
    assert busy.calls == [c for c in plain.calls if c[3]]
    assert busy.calls and all(c[3] for c in busy.calls)


def test_an_observer_added_during_a_run_is_shown_flags_from_then_on(monkeypatch: pytest.MonkeyPatch) -> None:
    late = Calls()
    first: list[JoinsLate] = []

    def make(dev: Any) -> None:
        # a busy_only observer first, so the pipes note the observers before ``late`` joins
        dev.observers.append(BusyCalls())
        first.append(JoinsLate(dev.observers, late))
        dev.observers.append(first[0])

    _run(monkeypatch, "off", make)
    whole = first[0].calls
    assert late.calls and any(not c[3] for c in late.calls)
    # ``late`` sees exactly what the first saw, from the completion during which it was added on
    # (the device's live list is walked: an observer appended by an earlier one is called next)
    assert late.calls == whole


class BusyJoinsLate(JoinsLate):
    """JoinsLate shown busy instructions only: while it is the only observer nobody sees flags
    (the pipes do them in short), until ``late`` joins."""

    busy_only = True


@pytest.mark.parametrize("swap", [False, True])
def test_an_observer_of_flags_joining_busy_only_ones_is_shown_flags_from_then_on(
        monkeypatch: pytest.MonkeyPatch, swap: bool) -> None:
    # the reference: every completion, seen by a plain observer from the start
    ref = Calls()
    _run(monkeypatch, "off", lambda dev: dev.observers.append(ref))
    late = Calls()
    joiner: list[BusyJoinsLate] = []

    def make(dev: Any) -> None:
        joiner.append(BusyJoinsLate(dev.observers, late))
        dev.observers.append(joiner[0])
        if swap:            # and a second busy_only observer (more than one to ask)
            dev.observers.append(BusyCalls())

    _run(monkeypatch, "off", make)
    first_busy = next(i for i, c in enumerate(ref.calls) if c[3])
    # ``late`` joined during the first busy completion: from there on it sees what the plain
    # observer of the reference run saw, flags included (none done in short after it joined)
    assert any(not c[3] for c in late.calls)
    assert late.calls == ref.calls[first_busy:]
    assert joiner[0].calls == [c for c in ref.calls if c[3]]


def test_profiler_is_busy_only_and_still_ignores_flags_when_called() -> None:
    prof = Profiler()
    assert prof.busy_only is True
    # the fast-forward shows every observer every instruction of a skipped round
    prof.on_instruction(None, None, isa.SetFlag("MTE2", "VECTOR", 0), 0, 0)
    assert prof.rows == {}


def test_instruction_classes_know_which_base_no_ops_they_keep() -> None:
    assert not isa.SetFlag.issues and isa.SetFlag.completes
    assert not isa.QueueFreeFlag.issues and isa.QueueFreeFlag.completes
    assert isa.WaitFlag.issues and not isa.WaitFlag.completes
    assert isa.DataCopy.issues and isa.DataCopy.completes
    assert not isa.Instruction.issues and not isa.Instruction.completes

    class Custom(isa.SetFlag):
        __slots__ = ()

        def issue(self, pipe: Any) -> int:
            return 3

    assert Custom.issues and Custom.completes


def test_an_issue_assigned_after_the_class_statement_is_called() -> None:
    from opsim import devices
    from opsim.simulator.device import Device

    class Busy(isa.Instruction):
        __slots__ = ()
        pipe = "VECTOR"
        name = "Busy"

    class Busier(Busy):
        __slots__ = ()

    def run() -> int:
        dev = Device(devices.load("atlas-a2"))

        def kernel(ctx: Any) -> Any:
            yield Busier()
        stream = dev.create_stream()
        dev.launch(stream, kernel, 1)
        dev.synchronize(stream)
        return int(dev.env.now)

    plain = run()
    Busy.issue = lambda self, pipe: 500          # type: ignore[method-assign]   (a monkeypatch)
    assert Busy.issues and Busier.issues
    assert run() == plain + 500
    del Busy.issue
    assert not Busy.issues and not Busier.issues
    assert run() == plain


def test_flag_pipes_are_their_source_and_destination() -> None:
    s, w = isa.SetFlag("MTE2", "VECTOR", 1), isa.WaitFlag("MTE2", "VECTOR", 1)
    assert (s.pipe, w.pipe) == ("MTE2", "VECTOR")
    assert (s.tile, s.origin, w.tile, w.origin) == (-1, None, -1, None)


class SwapsItself(Calls):
    """Replaces itself in the device's observers by ``successor`` at its first busy call. Every
    instance compares equal to every other, and ``bool(a == b)`` raises, as with observers that
    hold arrays: who is listening is decided by identity, never by ``==``."""

    def __init__(self, device_observers: list, successor: Calls | None) -> None:
        super().__init__()
        self.observers, self.successor = device_observers, successor

    def __eq__(self, other: object) -> Any:
        return np.ones(2) == np.ones(2)           # an array: its truth value raises

    __hash__ = Calls.__hash__

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        super().on_instruction(core, pipe, instr, start, end)
        # swap after flags have completed (so a cache of the list, if any, is filled)
        if instr.busy and self.successor is not None and any(not c[3] for c in self.calls):
            at = next(i for i, ob in enumerate(self.observers) if ob is self)
            self.observers[at] = self.successor       # the list keeps its length
            self.successor = None


@pytest.mark.parametrize("trace", ["off", "instruction"])
def test_an_observer_replaced_by_an_equal_one_stops_and_its_successor_sees_flags(
        monkeypatch: pytest.MonkeyPatch, trace: str) -> None:
    made: list[SwapsItself] = []

    def make(dev: Any) -> None:
        made.clear()
        second = SwapsItself(dev.observers, None)
        first = SwapsItself(dev.observers, second)
        made.extend([first, second])
        dev.observers.append(first)
    _run(monkeypatch, trace, make)
    first, second = made
    # the first stops at the busy call that swapped it; from then on the second gets every completion
    assert first.calls[-1][3] and any(not c[3] for c in first.calls)
    assert any(not c[3] for c in second.calls) and any(c[3] for c in second.calls)


def test_wrapped_flag_and_simpy_methods_are_called_and_change_nothing(monkeypatch):
    # the pipes do a flag's set/wait and SimPy's timeout/schedule inline, but a wrapper of any of
    # them (functools.wraps included, which copies a function's attributes) is called for every
    # flag and timer, as before the inlining -- with the same result (review finding)
    import functools

    from opsim.simulator.core import Core

    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(5000).astype(np.float32) for _ in range(2))

    def run() -> Any:
        return opsim.run("mse_loss_backward", device="atlas-a2", grad_output=np.float32(1.0), self=x,
                         target=y, reduction="none", trace="off")

    plain = run()
    counts = dict.fromkeys(["SetFlag.complete", "WaitFlag.issue", "Core.set_flag", "Core.wait_flag",
                            "env.step", "env.timeout"], 0)

    def wrap(cls: Any, name: str, key: str) -> None:
        orig = getattr(cls, name)

        @functools.wraps(orig)
        def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            counts[key] += 1
            return orig(self, *a, **k)
        monkeypatch.setattr(cls, name, wrapper)

    wrap(isa.SetFlag, "complete", "SetFlag.complete")
    wrap(isa.WaitFlag, "issue", "WaitFlag.issue")
    wrap(Core, "set_flag", "Core.set_flag")
    wrap(Core, "wait_flag", "Core.wait_flag")
    real = api.Device

    def device(*a: Any, **kw: Any) -> Any:
        dev = real(*a, **kw)
        env = dev.env
        step, timeout = env.step, env.timeout

        def counted_step() -> Any:
            counts["env.step"] += 1
            return step()

        def counted_timeout(*a: Any, **k: Any) -> Any:
            counts["env.timeout"] += 1
            return timeout(*a, **k)
        env.step, env.timeout = counted_step, counted_timeout
        return dev
    monkeypatch.setattr(api, "Device", device)
    wrapped = run()
    assert all(counts.values()), counts
    assert counts["SetFlag.complete"] == counts["Core.set_flag"]
    assert counts["WaitFlag.issue"] == counts["Core.wait_flag"]
    assert wrapped.cycles == plain.cycles
    np.testing.assert_array_equal(wrapped.outputs["out"], plain.outputs["out"])


def test_a_devices_own_simpy_environment_is_served_inline():
    # SimPy binds ``timeout`` into every environment's __dict__: that one is SimPy's own, so the
    # pipes put their events on the queue themselves (the inlining is not undone by it)
    from opsim import devices
    from opsim.simulator.core import _plain_env
    from opsim.simulator.device import Device
    dev = Device(devices.load("atlas-a2"), trace=None, functional=False)
    assert "timeout" in vars(dev.env)
    assert _plain_env(dev.env)
    dev.env.timeout = lambda delay, value=None: None     # a wrapper: not plain
    assert not _plain_env(dev.env)


def test_wrappers_installed_between_launches_are_called_in_the_next(monkeypatch):
    from opsim import devices
    from opsim.simulator import numerics as nx
    from opsim.simulator.core import Core
    from opsim.simulator.device import Device

    def kernel(ctx: Any) -> Any:
        a = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)
        for _ in range(6):
            yield isa.Add(a, a, a, count=64)
            yield isa.SetFlag("VECTOR", "MTE3", 0)
            yield isa.WaitFlag("VECTOR", "MTE3", 0)

    dev = Device(devices.load("atlas-a2"), trace=None, functional=False)
    stream = dev.create_stream()
    dev.launch(stream, kernel, 1, unit="vector")
    dev.synchronize()
    counts = {"set_flag": 0, "wait_flag": 0, "timeout": 0}
    real_set, real_wait, real_timeout = Core.set_flag, Core.wait_flag, dev.env.timeout

    def set_flag(self: Any, key: Any) -> Any:
        counts["set_flag"] += 1
        return real_set(self, key)

    def wait_flag(self: Any, key: Any) -> Any:
        counts["wait_flag"] += 1
        return real_wait(self, key)

    def timeout(delay: Any, value: Any = None) -> Any:
        counts["timeout"] += 1
        return real_timeout(delay, value)
    monkeypatch.setattr(Core, "set_flag", set_flag)
    monkeypatch.setattr(Core, "wait_flag", wait_flag)
    dev.env.timeout = timeout
    dev.launch(stream, kernel, 1, unit="vector")
    dev.synchronize()
    assert counts["set_flag"] == counts["wait_flag"] == 6 and counts["timeout"] >= 6


def test_an_unhashable_callable_may_be_assigned_as_an_instructions_complete():
    # the inline-flag marks are looked up by identity; any callable may be assigned (a monkeypatch)
    class Flag(isa.SetFlag):
        pass

    class Unhashable:
        __hash__ = None     # type: ignore[assignment]

        def __call__(self, *a: Any) -> None:
            pass

    Flag.complete = Unhashable()        # type: ignore[method-assign,assignment]
    assert Flag.inline_sync == 0 and Flag.completes


def test_an_instructions_own_busy_is_asked_per_instance() -> None:
    # Pipe._run reads the class's busy from Instruction.steps; a subclass whose busy is an
    # instance attribute or a property is asked per instruction, as before that cache
    from opsim import devices
    from opsim.simulator.device import Device

    class Wait(isa.Instruction):               # no __slots__: instances have a __dict__
        pipe = "VECTOR"
        name = "Wait"

        def __init__(self, cycles: int, busy: bool) -> None:
            super().__init__()
            self.cycles = cycles
            self.busy = busy                   # type: ignore[misc]

        def issue(self, pipe: Any) -> int:
            return self.cycles

    class Flagged(Wait):
        busy = property(lambda self: self.cycles < 150)    # type: ignore[assignment]

        def __init__(self, cycles: int, busy: bool) -> None:
            isa.Instruction.__init__(self)
            self.cycles = cycles

    for cls in (Wait, Flagged):
        def kernel(ctx: Any, cls: type = cls) -> Any:
            yield cls(100, True)
            yield cls(200, False)              # waits, but not busy
        dev = Device(devices.load("atlas-a2"))
        s = dev.create_stream()
        dev.launch(s, kernel, 1)
        dev.synchronize(s)
        vec = [p for c in dev.all_cores() for p in c.pipes.values() if p.name == "VECTOR" and p.instructions]
        assert [(p.busy_cycles, p.instructions) for p in vec] == [(100, 1)], cls.__name__


def test_simpy_events_are_made_with_the_fields_event_init_sets() -> None:
    # core.py makes its events as object.__new__(Event) plus env and callbacks, the fields
    # simpy.Event.__init__ sets (_value comes from the class): a SimPy release that sets more
    # must be followed there
    import simpy
    assert set(vars(simpy.Event(simpy.Environment()))) == {"env", "callbacks"}
