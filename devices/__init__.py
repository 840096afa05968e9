"""The device catalogue: typed hardware descriptions loaded from the TOML files in this folder."""
from .spec import DeviceSpec, Provenance, SpecError, catalogue, load, load_file
from .report import catalogue_table

__all__ = ["load", "load_file", "catalogue", "DeviceSpec", "SpecError", "Provenance",
           "catalogue_table"]
