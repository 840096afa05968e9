"""``asc.language.core``: see :mod:`opsim.asc.language.core.struct` and ``.dtype``."""
