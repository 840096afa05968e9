"""Every example kernel of examples/kernels runs as shipped: its own numpy check passes and it prints
its timing."""
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kernels"

# the kernels of docs/writing-kernels.md (other scripts in the folder have their own tests)
SCRIPTS = ["add_manual_flags", "add_tque", "leaky_relu", "softmax", "matmul_cube_only", "matmul_leaky_relu"]


def test_the_examples_exist():
    assert all((EXAMPLES / f"{name}.py").exists() for name in SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_main_runs_and_prints_its_timing(example, capsys, name):
    example(name).main()
    out = capsys.readouterr().out
    assert "cycles" in out and " us" in out
