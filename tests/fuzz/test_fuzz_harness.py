"""The fuzz harness's own judgement: a refusal raised by opsim's code counts as on purpose,
whether the module runs as Python or compiled (simulator/native.py)."""
from __future__ import annotations

import pytest

from fuzz_harness import raised_on_purpose
from opsim.simulator.links import LinkNetwork


def test_a_refusal_raised_in_the_link_network_is_on_purpose():
    import simpy
    net = LinkNetwork(simpy.Environment())
    net.add_link("hbm", 1.0)
    with pytest.raises(ValueError) as info:
        net.add_link("hbm", 1.0)        # a raise statement in links.py (compiled or not)
    assert raised_on_purpose(info.value)


def test_an_error_from_a_builtin_is_not():
    with pytest.raises(ValueError) as info:
        int("x")
    assert not raised_on_purpose(info.value)
