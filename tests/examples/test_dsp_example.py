"""examples/dsp_binarycrossentropygrad.py: the seed's two C examples run on both DSPs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from opsim.kernels import dsp

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dsp_binarycrossentropygrad.py"


def load_example():
    spec = importlib.util.spec_from_file_location("dsp_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("argv", [["--device", "ft78ne"], ["--device", "mt7004"], ["--device", "mt7004", "--half"]])
def test_both_seed_examples_run_and_match_the_golden(argv, capsys):
    results = load_example().main(argv)
    printed = capsys.readouterr().out
    assert "shared:" in printed and "private:" in printed
    for res in results.values():
        a = dict(res["inputs"])
        assert ("weight" in a) == (res["weight_defined"] == 1)            # _s: 1, _p: 0 as in the seed
        assert res["reduction"] == 1 and res["dx"].size == 1024
        gold = dsp.golden(a, {"reduction": res["reduction"]})["dx"]
        np.testing.assert_array_equal(res["dx"].view(np.uint8), gold.view(np.uint8))
        assert res["cycles"] > 0


def test_the_half_example_is_refused_on_ft78ne():
    with pytest.raises(SystemExit) as exc:
        load_example().main(["--device", "ft78ne", "--half"])
    assert "not supported on FT78NE" in str(exc.value)
