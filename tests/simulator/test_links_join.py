"""LinkNetwork.all_of: a joined completion of several transfers that resumes its waiter exactly
where simpy.AllOf would (same cycle, same order among processes), with fewer SimPy events."""
from __future__ import annotations

import random
from typing import Callable

import pytest
import simpy

from opsim.simulator.links import LinkNetwork

Join = Callable[[LinkNetwork, list], simpy.Event]


def _simpy_all_of(net: LinkNetwork, events: list) -> simpy.Event:
    return simpy.AllOf(net.env, events)


def _net_all_of(net: LinkNetwork, events: list) -> simpy.Event:
    return net.all_of(events)


def _run(join: Join, seed: int, wake_on_change: bool = False) -> tuple[list, dict, int]:
    """Several processes issue DMAs in a loop: single transfers, hit+miss pairs (two links, the
    same start-up), pairs joined again with a third transfer (as a write-back joins the dirty
    lines' HBM write), zero-byte legs. Returns the order in which processes resumed, each link's
    bandwidth history and the number of SimPy events processed."""
    rng = random.Random(seed)
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("HBM", 64.0)
    l2 = net.add_link("L2", 96.0)
    pool = net.add_pool("MTE2", 16.0)
    log: list[tuple[int, int, int]] = []
    if wake_on_change:
        # an on_change that wakes a process in the same cycle: it runs between a join's last
        # leg and the join (the network must then keep the relay event)
        def wake(now: int, rates: dict) -> None:
            env.process(note(now))

        def note(now: int) -> simpy.events.ProcessGenerator:
            yield env.timeout(0)
            log.append((now, -1, int(env.now)))
        net.on_change = wake
    plans = [[(rng.choice(("one", "pair", "nested", "zero")), rng.randrange(0, 2000),
               rng.randrange(0, 2000), rng.choice((0, 0, 3, 17)), rng.randrange(0, 5))
              for _ in range(12)] for _ in range(6)]

    def proc(pid: int, plan: list) -> simpy.events.ProcessGenerator:
        for step, (kind, a, b, startup, gap) in enumerate(plan):
            miss = net.transfer(a, base_rate=9.5, links=(hbm,), pool=pool, startup=startup, tag=pid)
            if kind == "one":
                ev = miss
            else:
                hit = net.transfer(0 if kind == "zero" else b, base_rate=20.0, links=(l2,),
                                   startup=startup, tag=pid)
                ev = join(net, [hit, miss])
                if kind == "nested":
                    wb = net.transfer(b // 3, base_rate=30.0, links=(hbm,), tag=pid)
                    ev = join(net, [ev, wb])
            yield ev
            log.append((int(env.now), pid, step))
            if gap:
                yield env.timeout(gap)

    for pid, plan in enumerate(plans):
        env.process(proc(pid, plan))
    count = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        count += 1
    series = {name: tuple(map(tuple, link.bandwidth_series())) for name, link in net.links.items()}
    return log, series, count


@pytest.mark.parametrize("wake_on_change", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_all_of_resumes_waiters_where_simpy_all_of_does(seed: int, wake_on_change: bool) -> None:
    log_ref, series_ref, events_ref = _run(_simpy_all_of, seed, wake_on_change)
    log, series, events = _run(_net_all_of, seed, wake_on_change)
    assert log == log_ref
    assert series == series_ref
    assert events < events_ref


@pytest.mark.parametrize("other_event_due", [False, True])
def test_a_joined_pair_costs_fewer_events_than_all_of(other_event_due: bool) -> None:
    # AllOf: both legs' events and its own. The join: no event for the leg done first; the last
    # leg's event relays to the join's, unless nothing else is due in that cycle (then none can
    # run in between, and the join's event is scheduled at once)
    def one(join: Join) -> tuple[int, int]:
        env = simpy.Environment()
        net = LinkNetwork(env)
        a, b = net.add_link("A", 10.0), net.add_link("B", 10.0)
        if other_event_due:
            def late() -> simpy.events.ProcessGenerator:
                yield env.timeout(59)
                yield env.timeout(1)            # due at 60, queued after the network's wake-up
            env.process(late())
        ev = join(net, [net.transfer(100, base_rate=5.0, links=(a,)),
                        net.transfer(300, base_rate=5.0, links=(b,))])
        n = 0
        while True:
            try:
                env.step()
            except simpy.core.EmptySchedule:
                break
            n += 1
        assert ev.processed
        return n, int(env.now)

    (n_ref, t_ref), (n, t) = one(_simpy_all_of), one(_net_all_of)
    assert t == t_ref == 60
    assert n == n_ref - (1 if other_event_due else 2)


def test_all_of_falls_back_to_simpy_all_of_for_other_events() -> None:
    env = simpy.Environment()
    net = LinkNetwork(env)
    link = net.add_link("A", 10.0)
    tr = net.transfer(10, base_rate=5.0, links=(link,))
    timer = env.timeout(7)
    ev = net.all_of([tr, timer])
    assert isinstance(ev, simpy.AllOf)
    env.run()
    assert ev.processed and env.now == 7


def test_all_of_refuses_an_event_joined_twice() -> None:
    env = simpy.Environment()
    net = LinkNetwork(env)
    link = net.add_link("A", 10.0)
    tr = net.transfer(10, base_rate=5.0, links=(link,))
    assert isinstance(net.all_of([tr, tr]), simpy.AllOf)     # a plain AllOf counts it twice
    env.run()


def test_all_of_refuses_an_event_that_is_joined_already() -> None:
    # a second join of it would never fire: the first join consumed its completion
    env = simpy.Environment()
    net = LinkNetwork(env)
    link = net.add_link("A", 10.0)
    a = net.transfer(10, base_rate=5.0, links=(link,))
    b = net.transfer(10, base_rate=5.0, links=(link,))
    net.all_of([a, b])
    with pytest.raises(ValueError, match="joined already"):
        net.all_of([a])


def test_a_new_on_change_is_not_taken_as_passive() -> None:
    # the relay shortcut is only safe for a callback known not to schedule events
    net = LinkNetwork(simpy.Environment())
    net.on_change = lambda now, rates: None
    net.on_change_passive = True
    net.on_change = lambda now, rates: None
    assert net.on_change_passive is False


def test_a_transfer_event_starts_pending_like_a_simpy_event() -> None:
    # _Completion sets simpy.Event's fields inline (one is made per transfer): a SimPy upgrade
    # that adds a field would show here
    env = simpy.Environment()
    net = LinkNetwork(env)
    ev = net.transfer(10, base_rate=5.0, links=(net.add_link("A", 10.0),))
    plain = simpy.Event(env)
    assert not ev.triggered and not ev.processed and ev.callbacks == []
    assert set(vars(plain)) <= set(dir(ev))
