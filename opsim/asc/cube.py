"""placeholder"""
from opsim.asc import _core
def fixpipe(*a, **k): raise _core.unsupported("fixpipe")
def load_data(*a, **k): raise _core.unsupported("load_data")
def mmad(*a, **k): raise _core.unsupported("mmad")
def set_sys_workspace(*a, **k): pass
def get_sys_workspace(*a, **k): return None
def data_copy_cube(*a, **k): raise _core.unsupported("cube data_copy")
def local_copy(*a, **k): raise _core.unsupported("local data_copy")
