"""Every script in examples/kernels runs as shipped: its own numpy check passes and it prints
its timing."""
import pathlib

import pytest

from conftest import EXAMPLES

SCRIPTS = sorted(p.stem for p in EXAMPLES.glob("*.py"))


def test_the_examples_are_the_documented_set():
    assert set(SCRIPTS) >= {"add_manual_flags", "add_tque", "leaky_relu", "softmax", "matmul_cube_only",
                            "matmul_leaky_relu"}


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_main_runs_and_prints_its_timing(example, capsys, name):
    example(name).main()
    out = capsys.readouterr().out
    assert "cycles" in out and " us" in out
