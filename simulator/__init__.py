"""The discrete-event engine (opsim.simulator). Its hot modules may run compiled: see native.py."""
from opsim.simulator import native as _native

_native.enable(__path__)
