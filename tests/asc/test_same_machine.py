"""No second simulator: a pyasc kernel and the same program in the generator kernel language
produce identical cycles and bits on the same device (benchmarks/asc_frontend.py)."""
import importlib.util
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "asc_frontend.py"


def test_asc_front_end_and_native_kernel_are_the_same_machine_run():
    spec = importlib.util.spec_from_file_location("asc_frontend_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.measure(8 * 8192, 1024)
    assert r["asc_cycles"] == r["native_cycles"]
    assert r["same_bits"]
