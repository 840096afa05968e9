"""The regression corpus (benchmarks/corpus.py): every recorded configuration replays to the same
cycles, bytes, busy cycles, trace, observer stream and output bits.

A difference here means the engine's results moved. If that is intended (a fidelity fix),
regenerate with ``python benchmarks/corpus.py --update`` and say why in the commit.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "corpus.py"
_spec = importlib.util.spec_from_file_location("opsim_corpus", _PATH)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

ENTRIES = corpus.load()


def test_corpus_covers_every_configuration_and_is_large_enough():
    recorded = [e["id"] for e in ENTRIES]
    assert recorded == [c["id"] for c in corpus.configs()], \
        "the configurations changed (a device or dtype was added?): python benchmarks/corpus.py --update"
    assert len(recorded) >= 300
    modes = {e["mode"] for e in ENTRIES}
    assert modes == {"timing", "full"}
    assert not any("error" in e["result"] for e in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_configuration_replays_identically(entry):
    got = json.loads(json.dumps(corpus.measure(entry)))
    assert corpus.diff(entry["result"], got) == []
