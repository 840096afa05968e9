"""The optional compiled engine (simulator/native.py): used only when it matches its sources."""
from __future__ import annotations

import json
import os
import warnings

import pytest

import opsim.simulator.links as links
from opsim.simulator import native


def _fake_build(tmp_path, monkeypatch, digests: dict[str, str]) -> None:
    out = tmp_path / "lib"
    out.mkdir()
    manifest = out / "manifest.json"
    (out / "links.so").write_bytes(b"")
    manifest.write_text(json.dumps({"platform": native._platform(), "modules": digests,
                                    "artifacts": ["links.so"]}))
    monkeypatch.setattr(native, "_OUT", out)
    monkeypatch.setattr(native, "_MANIFEST", manifest)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(native, "_state", dict(native._state))   # enable() records what it found


def test_a_build_matching_every_source_goes_first_on_the_package_path(tmp_path, monkeypatch):
    _fake_build(tmp_path, monkeypatch, {n: native._digest(n) for n in native.MODULES})
    path = ["src"]
    native.enable(path)
    assert path == [str(tmp_path / "lib"), "src"]


def test_a_build_older_than_a_source_is_not_used_and_says_how_to_rebuild(tmp_path, monkeypatch):
    _fake_build(tmp_path, monkeypatch, {n: "0" * 64 for n in native.MODULES})
    path = ["src"]
    with pytest.warns(RuntimeWarning, match=r"older than links\.py.*make native"):
        native.enable(path)
    assert path == ["src"]


def test_the_environment_variable_chooses_pure_python_silently(tmp_path, monkeypatch):
    _fake_build(tmp_path, monkeypatch, {n: native._digest(n) for n in native.MODULES})
    monkeypatch.setenv(native.PURE_ENV, "1")
    path = ["src"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native.enable(path)
    assert path == ["src"]
    assert "OPSIM_PURE_PYTHON" in (native._check() or "")


def test_a_build_of_another_python_or_module_list_is_not_used(tmp_path, monkeypatch):
    _fake_build(tmp_path, monkeypatch, {"other": "0"})
    assert "other modules" in native._check()
    manifest = native._MANIFEST
    manifest.write_text(json.dumps({"platform": "cpython-00 .so", "modules": {}}))
    assert "built for cpython-00" in native._check()


def test_the_engine_this_process_runs_is_the_one_status_reports():
    """Where a usable build exists (make test builds one if it can), the modules are compiled;
    with OPSIM_PURE_PYTHON=1 (make test-pure) they are the Python sources."""
    compiled = not links.__file__.endswith(".py")
    st = native.status()
    assert st["modules"]["links"] == ("compiled" if compiled else "python")
    assert st["engine"] == ("compiled" if compiled else "python")
    if os.environ.get(native.PURE_ENV):
        assert not compiled
    elif native._check() is None or os.environ.get(native.REQUIRE_ENV):
        assert compiled, st     # CI requires the native build (OPSIM_REQUIRE_NATIVE=1)


def test_a_build_missing_a_module_file_is_not_used(tmp_path, monkeypatch):
    _fake_build(tmp_path, monkeypatch, {n: native._digest(n) for n in native.MODULES})
    (tmp_path / "lib" / "links.so").unlink()
    path = ["src"]
    with pytest.warns(RuntimeWarning, match="incomplete: links.so missing"):
        native.enable(path)
    assert path == ["src"]


def test_a_failed_build_is_not_retried_for_the_same_sources_unless_required(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_MANIFEST", tmp_path / "none.json")
    monkeypatch.setattr(native, "_FAILED", tmp_path / "failed.json")
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.delenv(native.REQUIRE_ENV, raising=False)
    calls = []
    monkeypatch.setattr(native, "BUILD", tmp_path)
    monkeypatch.setattr(native, "_build", lambda opt="3": calls.append(opt) or 1)
    (tmp_path / "failed.json").write_text(json.dumps(native._wanted()))
    assert "python simulator/native.py build retries" in native._check()   # status says how
    assert native.ensure() == 0 and calls == []
    monkeypatch.setenv(native.REQUIRE_ENV, "1")
    assert native.ensure() == 1 and len(calls) == 1


def test_an_install_outside_a_checkout_runs_pure_python_and_build_says_where_it_builds(
        monkeypatch, capsys):
    """Installed from a wheel (no Makefile next to the package), nothing is built into
    site-packages: the engine is pure Python and ``build`` explains, without a traceback."""
    monkeypatch.setattr(native, "_CHECKOUT", False)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    assert "checkout of the repository" in native._check()
    assert native.build() == 1
    assert "pip install -e ." in capsys.readouterr().err


def test_the_compile_step_keeps_a_times_b_plus_c_two_roundings():
    """Pure Python never fuses a multiply and an add; the C compiler must not either (GCC does
    by default on aarch64, or with -march=native, and the floats would then differ)."""
    assert "-ffp-contract=off" in native._SCRIPT


def test_a_build_running_elsewhere_is_waited_for_and_then_kept(tmp_path, monkeypatch):
    """Two `make native` at once: the second waits for the first's lock, then finds its build
    usable and does not build again."""
    import threading
    monkeypatch.setattr(native, "BUILD", tmp_path)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    state = {"built": False}
    monkeypatch.setattr(native, "_check", lambda: None if state["built"] else "no native build")
    calls = []
    monkeypatch.setattr(native, "_build", lambda opt="3": calls.append(opt) or 0)
    with native._lock():
        waiter = threading.Thread(target=native.ensure)
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()            # blocked on the lock
        state["built"] = True               # the first run's build lands
    waiter.join(10)
    assert not waiter.is_alive() and calls == []


def test_an_unknown_command_prints_the_usage(capsys):
    assert native.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:") and "ensure" in err and "status" in err


def test_transfers_of_one_route_share_one_rate_class():
    """The class is found by the route key's identity; compiled, a key of fixed-length tuple type
    would be boxed anew at each use and split a route into several classes (whose float sums
    differ in the last bits)."""
    import simpy

    env = simpy.Environment()
    net = links.LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    for _ in range(3):
        net.transfer(10_000, base_rate=4.0, links=[hbm])
    env.run(until=5)
    assert len(net._classes) == 1 and next(iter(net._classes.values())).n == 3
