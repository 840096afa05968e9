"""The device catalogue: typed hardware descriptions loaded from the TOML files in this folder.

Installed as ``opsim.devices``. The package is also callable: ``opsim.devices()`` returns the
catalogue names (the public API of docs/sources.md#design-public-api-s9), so one name serves as both the function users
call and the subpackage the layers import.
"""
import sys
import types

from .spec import DeviceSpec, Provenance, SpecError, catalogue, load, load_file
from .report import catalogue_table

__all__ = ["load", "load_file", "catalogue", "DeviceSpec", "SpecError", "Provenance",
           "catalogue_table"]


class _CallableCatalogue(types.ModuleType):
    """Module type of this package: calling it lists the catalogue (``opsim.devices()``)."""

    def __call__(self) -> list[str]:
        return catalogue()


sys.modules[__name__].__class__ = _CallableCatalogue
