"""The device-file loader: malformed files are rejected clearly; what-if overrides validate."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from opsim.devices import SpecError, load, load_file
from opsim.devices.spec import CATALOGUE_DIR

A2_TEXT = (CATALOGUE_DIR / "atlas-a2.toml").read_text(encoding="utf-8")
FT_TEXT = (CATALOGUE_DIR / "ft78ne.toml").read_text(encoding="utf-8")


def _write(tmp_path: Path, text: str, name: str = "bad-device.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _sub(text: str, pattern: str, repl: str) -> str:
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    return new


def _rejected(tmp_path: Path, text: str, *needles: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_file(path)
    msg = str(info.value)
    assert str(path) in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------
# Malformed files
# ---------------------------------------------------------------------------------------------

def test_unmodified_copy_loads(tmp_path):
    assert load_file(_write(tmp_path, A2_TEXT)).ub.size == 196608


def test_number_without_provenance_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^size = \{ value = 196608, source = .*\}$", "size = 196608")
    _rejected(tmp_path, text, "ub.size", "provenance")


def test_empty_provenance_text_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^size = \{ value = 196608, source = .*\}$",
                'size = { value = 196608, source = "  " }')
    _rejected(tmp_path, text, "ub.size")


def test_both_source_and_assumption_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^size = \{ value = 196608, source = .*\}$",
                'size = { value = 196608, source = "a", assumption = "b" }')
    _rejected(tmp_path, text, "ub.size")


def test_unknown_field_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^\[ub\]$", '[ub]\nbanks = { value = 64, source = "INI" }')
    _rejected(tmp_path, text, "ub.banks")


def test_unknown_top_level_field_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^series = .*$", 'series = "a2"\nvendor = "x"')
    _rejected(tmp_path, text, "vendor")


def test_wrong_type_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^size = \{ value = 196608, source = (.*)\}$",
                r'size = { value = "192 KiB", source = \1}')
    _rejected(tmp_path, text, "ub.size", "integer")


def test_fractional_integer_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^aiv = \{ value = 48,", "aiv = { value = 47.5,")
    _rejected(tmp_path, text, "cores.aiv")


def test_negative_number_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^bandwidth = \{ value = 1.3824e12,", "bandwidth = { value = -1.3824e12,")
    _rejected(tmp_path, text, "gm.bandwidth", ">= 0")


def test_negative_cost_coefficient_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^Add = \{ fp16 = \[0.0103,", "Add = { fp16 = [-0.0103,")
    _rejected(tmp_path, text, "vector.cost.Add.fp16")


def test_bad_toml_syntax_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^\[ub\]$", "[ub")
    _rejected(tmp_path, text, "malformed TOML")


def test_missing_section_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^\[launch\]\noverhead = .*\n", "")
    _rejected(tmp_path, text, "missing section", "launch")


def test_missing_dsp_section_is_rejected(tmp_path):
    text = _sub(FT_TEXT, r"^\[dma\]\n(?:.*\n)*?\n", "")
    _rejected(tmp_path, text, "missing section", "dma")


def test_missing_field_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^capacity = \{ value = 68719476736, .*\n", "")
    _rejected(tmp_path, text, "gm.capacity")


def test_unknown_family_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r'^family = "ascend"$', 'family = "gpu"')
    _rejected(tmp_path, text, "family", "gpu")


def test_unknown_architecture_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r'^architecture = "split"$', 'architecture = "fused"')
    _rejected(tmp_path, text, "cores.architecture")


def test_unknown_memory_kind_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r'^kind = "HBM"$', 'kind = "SRAM"')
    _rejected(tmp_path, text, "gm.kind")


def test_kernel_entry_that_is_not_a_table_is_rejected(tmp_path):
    text = _sub(A2_TEXT, r"^\[kernels.embedding_dense_backward\]$",
                '[kernels]\nembedding_dense_backward = { value = 1, source = "x" }')
    _rejected(tmp_path, text, "kernels.embedding_dense_backward")


def test_missing_file_is_reported(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError, match="nope.toml"):
        load_file(path)


def test_unknown_catalogue_name_lists_the_known_devices():
    with pytest.raises(SpecError) as info:
        load("atlas-z9")
    assert "atlas-z9" in str(info.value) and "atlas-a2" in str(info.value)


# ---------------------------------------------------------------------------------------------
# A user's own file
# ---------------------------------------------------------------------------------------------

def test_loading_a_users_own_file_by_path(tmp_path):
    text = _sub(A2_TEXT, r'^name = "atlas-a2"$', 'name = "my-npu"')
    text = _sub(text, r"^size = \{ value = 196608, source = .*\}$",
                'size = { value = 131072, assumption = "my smaller UB" }')
    path = _write(tmp_path, text, "my-npu.toml")
    for spec in (load(path), load(str(path)), load_file(path)):
        assert spec.name == "my-npu"
        assert spec.ub.size == 131072
        assert spec.provenance["ub.size"].kind == "assumption"
        assert spec.origin == str(path)


# ---------------------------------------------------------------------------------------------
# What-if overrides
# ---------------------------------------------------------------------------------------------

def test_replace_sets_the_field_and_records_an_override():
    base = load("atlas-a2")
    spec = base.replace("ub.size", 262144)
    assert spec.ub.size == 262144 and base.ub.size == 196608
    assert spec.get("ub.size") == 262144
    prov = spec.provenance["ub.size"]
    assert prov.kind == "override" and "ub.size" in prov.text
    assert base.provenance["ub.size"].kind == "source"
    assert spec != base


def test_replace_rejects_unknown_keys_with_the_key_in_the_message():
    spec = load("atlas-a2")
    for key in ("ub.sise", "nosuch.size", "foo"):
        with pytest.raises(SpecError) as info:
            spec.replace(key, 1)
        assert key in str(info.value)


def test_replace_rejects_wrong_types_with_the_key_in_the_message():
    spec = load("atlas-a2")
    for key, value in (("ub.size", "big"), ("cores.aiv", 2.5), ("cores.aiv", True),
                       ("gm.bandwidth", "fast"), ("ub.size", -1)):
        with pytest.raises(SpecError) as info:
            spec.replace(key, value)
        assert key in str(info.value)


def test_replace_accepts_the_memorys_own_name():
    hbm = load("atlas-a2").replace("hbm.bandwidth", 2.0e12)
    assert hbm.gm.bandwidth == 2.0e12
    assert hbm.provenance["gm.bandwidth"].kind == "override"
    ddr = load("atlas-inference").replace("ddr.bandwidth", 207.16e9)
    assert ddr.gm.bandwidth == pytest.approx(207.16e9)
    dsp = load("ft78ne").replace("ddr.bandwidth", 25.6e9)
    assert dsp.gm.bandwidth == pytest.approx(25.6e9)
    with pytest.raises(SpecError, match="ddr.bandwidth"):
        load("atlas-a2").replace("ddr.bandwidth", 1e9)
    with pytest.raises(SpecError, match="hbm.bandwidth"):
        load("atlas-inference").replace("hbm.bandwidth", 1e9)


def test_replace_cores_and_clock():
    spec = load("atlas-a2").replace("cores.aiv", 40)
    assert spec.cores.aiv == 40 and spec.vector_cores == 40
    fast = load("atlas-a2").replace("clock_hz", 2_000_000_000)
    assert fast.clock_hz == 2_000_000_000
    assert fast.cycles_to_us(2000) == pytest.approx(1.0)
    assert fast.provenance["clock_hz"].kind == "override"
    with pytest.raises(SpecError, match="clock_hz"):
        load("atlas-a2").replace("clock_hz", 0)


def test_replace_many_and_optional_fields():
    spec = load("atlas-a2").replace_many({"ub.size": 131072, "vector.lanes": {"fp16": 128}})
    assert spec.ub.size == 131072 and dict(spec.vector.lanes) == {"fp16": 128}
    assert spec.provenance["vector.lanes"].kind == "override"


def test_replacing_a_table_drops_the_stale_provenance_of_its_entries():
    spec = load("ft78ne").replace("vector.cost", {"Add": {"fp32": [0.1, 4]}})
    assert dict(spec.vector.cost) == {"Add": {"fp32": (0.1, 4.0)}}
    assert spec.provenance["vector.cost"].kind == "override"
    assert not any(k.startswith("vector.cost.") for k in spec.provenance)


def _device_file(tmp_path, edit) -> tuple[str, int]:
    """atlas-a2.toml with one line changed by ``edit(line) -> line or None``; (path, that line)."""
    lines = (CATALOGUE_DIR / "atlas-a2.toml").read_text().splitlines()
    for i, line in enumerate(lines):
        new = edit(line)
        if new is not None and new != line:
            lines[i] = new
            break
    else:
        raise AssertionError("the edit matched no line")
    path = tmp_path / "dev.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path), i + 1


@pytest.mark.parametrize("edit, needle", [
    # a misspelt field, a misspelt provenance key, a wrong type, a number without provenance
    (lambda s: s.replace("size = { value = 196608", "sise = { value = 196608") if s.startswith("size = { value = 196608") else None,
     "unknown field(s) ub.sise; allowed in [ub]: size, alignment"),
    (lambda s: s.replace(", source", ", sourse") if s.startswith("read_rate = { value = 110") else None,
     "field 'l2.read_rate' has unexpected keys ['sourse']"),
    (lambda s: s.replace("value = 1800000000", 'value = "1.8GHz"') if s.startswith("clock_hz") else None,
     "field 'clock_hz' must be an integer, got '1.8GHz'"),
    (lambda s: "m = 16" if s.startswith("m = { value = 16") else None,
     "number at 'cube.m' has no provenance"),
], ids=["misspelt-field", "misspelt-provenance-key", "wrong-type", "no-provenance"])
def test_an_error_in_a_device_file_names_the_field_and_its_line(tmp_path, edit, needle):
    path, line = _device_file(tmp_path, edit)
    with pytest.raises(SpecError) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and needle in str(info.value)


def test_a_missing_field_points_at_the_table_that_should_hold_it(tmp_path):
    text = (CATALOGUE_DIR / "atlas-a2.toml").read_text()
    lines = [s for s in text.splitlines() if not s.startswith("bandwidth = { value = 1.3824e12")]
    path = tmp_path / "dev.toml"
    path.write_text("\n".join(lines) + "\n")
    gm_line = lines.index("[gm]") + 1
    with pytest.raises(SpecError, match=rf"^{re.escape(str(path))}:{gm_line}: missing field 'gm.bandwidth'$"):
        load_file(path)


def test_the_cli_names_the_field_and_line_of_a_bad_device_file(tmp_path, capsys):
    from opsim.cli import main
    path, line = _device_file(tmp_path, lambda s: s.replace(", source", ", sourse")
                              if s.startswith("read_rate = { value = 110") else None)
    assert main(["run", "mse_loss_backward", "--device", path, "--mode", "timing", "--shape", "64"]) == 2
    assert main(["devices", path]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{path}:{line}: field 'l2.read_rate' has unexpected keys ['sourse']") == 2
    assert "Traceback" not in err


def test_field_lines_follow_tables_dotted_keys_and_skip_multiline_strings():
    from opsim.devices.toml_lines import field_line
    text = ('name = "x"\n'
            'description = """\n'
            'clock_hz = 3 is prose here\n'
            '"""\n'
            "clock_hz = { value = 1, source = \"s\" }\n"
            "[vector.cost]\n"
            "Add = { fp16 = [1, 2] }\n"
            "a.b = 1\n")
    assert field_line(text, "clock_hz") == 5
    assert field_line(text, "vector.cost.Add.fp16") == 7
    assert field_line(text, "vector.cost.a.b") == 8
    assert field_line(text, "vector.cost.Sub") == 6
    assert field_line(text, "cube.m") is None


@pytest.mark.parametrize("key,value", [("cores.aic", 16), ("cores.aiv", 64)])
def test_a_coupled_part_refuses_different_ai_and_vector_core_counts(key, value):
    # A coupled AI core runs the vector code itself: the simulator builds cores.aic AI cores,
    # and a vector kernel's plan splits over cores.aiv of them. A what-if changing one count
    # planned 32 blocks for 16 cores (two waves) or ignored 32 of 64 cores; it is refused,
    # naming both fields and their values.
    spec = load("atlas-training")
    with pytest.raises(SpecError) as info:
        spec.replace(key, value)
    msg = str(info.value)
    assert "cores.aic" in msg and "cores.aiv" in msg and str(value) in msg and "coupled" in msg
    both = spec.replace_many({"cores.aic": 16, "cores.aiv": 16})
    assert both.cores.aic == both.cores.aiv == both.vector_cores == 16
