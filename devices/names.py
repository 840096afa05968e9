"""Close-match suggestions for a misspelt name (a device, a device field, an operator, a study key).

It lives in the lowest layer so that every layer above can name the likely intended spelling in
its error message the same way.
"""
from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``word``, or ``""`` if none is close.

    Case and the separators ``-``/``_`` are ignored when comparing, so ``atlas_a2`` finds
    ``atlas-a2`` and ``MSE_loss_backward`` finds ``mse_loss_backward``.
    """
    def key(s: str) -> str:
        return s.lower().replace("-", "_")

    by_key: dict[str, str] = {}
    for c in choices:
        by_key.setdefault(key(c), c)
    best = difflib.get_close_matches(key(str(word)), list(by_key), n=1, cutoff=0.6)
    return f" (did you mean {by_key[best[0]]!r}?)" if best else ""
