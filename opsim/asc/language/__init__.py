"""``asc.language``: the module paths pyasc programs import from directly
(``from asc.language.core.struct import Struct, Field, StructField``)."""
