"""Device files are checked for plausibility: values the simulator divides by are positive,
counts and sizes are bounded (documented limits, overridable by environment variables), and the
file itself must be a regular, bounded, shallow TOML file."""
from __future__ import annotations


import pytest

from opsim import devices
from opsim.devices import SpecError, load, load_file
from opsim.devices.limits import DEFAULTS, limit
from opsim.devices.spec import CATALOGUE_DIR


@pytest.mark.parametrize("device, key, value, needle", [
    ("atlas-a2", "mte2.base", 0, "mte2.base' = 0.0 is not plausible: must be > 0"),
    ("atlas-a2", "mte3.base", 0, "mte3.base"),
    ("atlas-a2", "gm.alignment", 0, "gm.alignment' = 0"),
    ("atlas-a2", "l2.chunk", 0, "l2.chunk' = 0"),
    ("atlas-a2", "l2.chunk", 1 << 40, "must be <= l2.size"),
    ("atlas-a2", "scalar.queue_depth", 0, "scalar.queue_depth' = 0"),
    ("atlas-a2", "scalar.queue_depth", 10 ** 9, "limit MAX_QUEUE_DEPTH"),
    ("atlas-a2", "ub.size", 0, "ub.size' = 0"),
    ("atlas-a2", "ub.size", 1 << 40, "limit MAX_LOCAL_BYTES"),
    ("atlas-a2", "gm.capacity", 0, "gm.capacity' = 0"),
    ("atlas-a2", "gm.capacity", 1 << 60, "limit MAX_GM_BYTES"),
    ("atlas-a2", "cores.aiv", 10 ** 6, "'cores (aic + aiv + dsp)' = 1000024"),
    ("atlas-a2", "clock_hz", 10 ** 15, "limit MAX_CLOCK_HZ"),
    ("atlas-a2", "vector.repeat_bytes", 0, "vector.repeat_bytes"),
    ("atlas-a2", "cube.k", 0, "cube.k"),
    ("atlas-training", "kernels.embedding_dense_backward.ub_budget", 0, "ub_budget' = 0"),
    ("ft78ne", "dma.base", 0, "dma.base"),
    ("ft78ne", "private.capacity", 0, "private.capacity"),
    ("ft78ne", "cores.dsp", 10 ** 6, "cores (aic + aiv + dsp)"),
])
def test_an_implausible_value_is_refused_naming_the_field(device, key, value, needle):
    with pytest.raises(SpecError) as info:
        devices.load(device).replace(key, value)
    assert needle in str(info.value) and str(info.value).startswith(device)


def test_every_catalogue_device_is_plausible():
    for name in devices.catalogue():
        load(name)


def test_a_limit_can_be_raised_by_environment_variable(monkeypatch):
    with pytest.raises(SpecError, match="OPSIM_LIMIT_MAX_CORES"):
        load("atlas-a2").replace("cores.aiv", 4000)
    monkeypatch.setenv("OPSIM_LIMIT_MAX_CORES", "8192")
    assert limit("MAX_CORES") == 8192 != DEFAULTS["MAX_CORES"]
    assert load("atlas-a2").replace("cores.aiv", 4000).cores.aiv == 4000
    monkeypatch.setenv("OPSIM_LIMIT_MAX_CORES", "many")
    with pytest.raises(ValueError, match="OPSIM_LIMIT_MAX_CORES='many' must be an integer"):
        limit("MAX_CORES")


def test_a_device_node_is_not_read():
    with pytest.raises(SpecError, match="/dev/zero: cannot read device file: not a regular file"):
        load("/dev/zero")


def test_a_deeply_nested_or_huge_file_is_refused(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(SpecError, match="nested too deeply"):
        load_file(deep)
    nested = tmp_path / "nested.toml"
    nested.write_text("a = " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(SpecError, match="nests tables/arrays 40 deep; at most 32"):
        load_file(nested)
    big = tmp_path / "big.toml"
    big.write_text((CATALOGUE_DIR / "atlas-a2.toml").read_text() + "#" * (5 << 20))
    with pytest.raises(SpecError, match="larger than 4194304 bytes"):
        load_file(big)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"name = \"\xff\xfe\"\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_file(binary)


def test_the_cli_refuses_an_implausible_device_cleanly(capsys):
    from opsim.cli import main
    assert main(["run", "mse_loss_backward", "--device", "/dev/zero"]) == 2
    assert main(["run", "mse_loss_backward", "--set", "l2.chunk=0", "--mode", "timing"]) == 2
    assert main(["devices", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and "l2.chunk' = 0" in err and "Traceback" not in err
