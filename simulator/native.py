"""The engine's hot modules compiled to C with mypyc, and the switch that uses them.

The simulator is pure Python. A handful of its modules -- the ones every simulated instruction
runs through (:data:`MODULES`) -- are also valid input to mypyc, the compiler that ships with
mypy: ``make native`` (run by ``make test`` and ``make demo``) compiles them into
``build/native/`` of the repository. When ``opsim.simulator`` is imported, :func:`enable` puts
that directory in front of the package's search path if the build matches the sources byte for
byte (a SHA-256 of each source is kept in the build's manifest), so ``import
opsim.simulator.links`` loads the compiled module. The same source runs either way; the
regression corpus (``tests/test_corpus.py``) replays identically in both, and CI runs the
default test lane in both.

Nothing requires the build: without a C compiler, with the build missing, or with
``OPSIM_PURE_PYTHON=1`` in the environment, everything runs as pure Python. A build that no
longer matches its sources (a module edited since) is not used, with a warning that says how to
rebuild it. :func:`status` tells which one runs.

    python simulator/native.py ensure   # build unless a usable build exists (make native)
    python simulator/native.py build    # compile MODULES into build/native
    python simulator/native.py status   # which engine an import gets, and why

A build that failed is not retried by ``ensure`` until a source or this Python changes (a
machine without a compiler pays for the attempt once); with ``OPSIM_REQUIRE_NATIVE=1`` (CI)
a failed build is an error and ``tests/simulator/test_native.py`` requires the compiled
modules. Builds in one checkout take turns (a lock in ``build/native``); a new build replaces
the old one only once complete. The C compiler runs with ``-ffp-contract=off`` and without the
user's ``CFLAGS``, so that no multiply and add are fused into one rounding that Python does not
make.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import sys
import sysconfig
import warnings
from collections.abc import Iterator
from typing import Any

# The modules compiled, in the package opsim.simulator. Each must run the same compiled and as
# Python: no object.__new__ on its classes, no identity of fixed-length tuples (mypyc unboxes
# them), annotations that hold at run time (mypyc checks them), no class patched at run time.
MODULES: tuple[str, ...] = ("links",)

PURE_ENV = "OPSIM_PURE_PYTHON"
REQUIRE_ENV = "OPSIM_REQUIRE_NATIVE"
_PKG = pathlib.Path(__file__).resolve().parent          # the sources of opsim.simulator
_ROOT = _PKG.parent                                     # the repository (editable installs)
BUILD = _ROOT / "build" / "native"
_OUT = BUILD / "lib" / "opsim" / "simulator"            # where the extension modules go
_MANIFEST = _OUT / "manifest.json"
_FAILED = BUILD / "failed.json"                         # the sources a build failed for
# the build runs in a checkout of the repository (an editable install), never in site-packages
_CHECKOUT = (_ROOT / "Makefile").is_file() and (_ROOT / "opsim").is_dir()
_USAGE = """usage: python simulator/native.py {ensure | build | status}
  ensure   build unless a usable build exists (make native)
  build    compile native.MODULES into build/native
  status   which engine an import gets, and why"""

# what enable() found: "compiled", or the reason the engine runs as pure Python
_state: dict[str, Any] = {"engine": "python", "reason": "not checked"}


def _digest(name: str) -> str:
    return hashlib.sha256((_PKG / f"{name}.py").read_bytes()).hexdigest()


def _platform() -> str:
    return f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}"


def _check() -> str | None:
    """Why the build cannot be used, or None if it matches the sources and this Python."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    if not _CHECKOUT:
        return "installed from a wheel: no native build (it is made in a checkout of the repository)"
    if not _MANIFEST.is_file():
        if _failed_before():
            return (f"the native build failed for these sources ({_FAILED}; "
                    "python simulator/native.py build retries)")
        return "no native build (make native)"
    try:
        manifest = json.loads(_MANIFEST.read_text())
    except (OSError, ValueError):
        return f"unreadable manifest {_MANIFEST}"
    if manifest.get("platform") != _platform():
        return f"built for {manifest.get('platform')}, this Python is {_platform()} (make native)"
    built = manifest.get("modules", {})
    if tuple(sorted(built)) != tuple(sorted(MODULES)):
        return "the build compiled other modules than native.MODULES (make native)"
    stale = [n for n in MODULES if built[n] != _digest(n)]
    if stale:
        return f"the native build is older than {', '.join(n + '.py' for n in stale)} (make native)"
    missing = [a for a in manifest.get("artifacts", ()) if not (_OUT / a).is_file()]
    if missing or not manifest.get("artifacts"):
        return f"the native build is incomplete: {', '.join(missing) or 'no modules'} missing (make native)"
    return None


def _wanted() -> dict[str, Any]:
    return {"platform": _platform(), "modules": {n: _digest(n) for n in MODULES}}


def enable(path: list[str]) -> None:
    """Put the native build in front of ``path`` (``opsim.simulator.__path__``) if it can be
    used; warn if it exists but is out of date. Called once, by the package's ``__init__``."""
    why = _check()
    if why is None:
        path.insert(0, str(_OUT))
        _state.update(engine="compiled", reason=f"mypyc build in {_OUT}")
        return
    _state.update(engine="python", reason=why)
    if "older than" in why or "built for" in why or "incomplete" in why:
        warnings.warn(f"opsim: running the engine as pure Python: {why}", RuntimeWarning, stacklevel=3)


def status() -> dict[str, Any]:
    """Which engine runs: ``{"engine": "compiled" | "python", "reason": ..., "modules": {name:
    "compiled" | "python"}}`` (each of :data:`MODULES` as actually imported, if it is)."""
    if _state["reason"] == "not checked":      # not imported as opsim.simulator's (a script)
        why = _check()
        _state.update(engine="compiled" if why is None else "python",
                      reason=why or f"mypyc build in {_OUT}")
    mods = {}
    for name in MODULES:
        mod = sys.modules.get(f"opsim.simulator.{name}")
        if mod is not None:
            mods[name] = "python" if str(getattr(mod, "__file__", "")).endswith(".py") else "compiled"
    return {**_state, "modules": mods}


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Hold ``build/native/.lock`` (two ``make`` runs at once in one checkout build one after
    the other; the second finds the first's build and keeps it). No lock where fcntl is missing."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as fh:
        try:
            import fcntl
        except ImportError:         # not POSIX
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# The compile step. -ffp-contract=off: a C compiler may fuse a * b + c into one rounding (GCC
# does on aarch64, or with -march=native), which pure Python never does; the user's CFLAGS are
# not passed (a -ffast-math there would change results just as silently).
_SCRIPT = (
    "import sys\n"
    "from setuptools import setup\n"
    "from mypyc.build import mypycify\n"
    "mods = sys.argv[1].split(',')\n"
    "exts = mypycify([f'opsim/simulator/{m}.py' for m in mods], opt_level=sys.argv[2],\n"
    "                separate=True, target_dir=sys.argv[3])\n"
    "for ext in exts:\n"
    "    ext.extra_compile_args = [*ext.extra_compile_args, '-ffp-contract=off']\n"
    "setup(name='opsim-native', ext_modules=exts,\n"
    "      script_args=['build_ext', '--build-lib', sys.argv[4], '--build-temp', sys.argv[3]])\n"
)


def build(opt_level: str = "3") -> int:
    """Compile :data:`MODULES` into ``build/native`` and write the manifest; 0 on success.

    mypyc resolves imports through the installed layout (``opsim.simulator`` is the folder
    ``simulator/``), so it runs in the symlink tree ``.ci/typecheck`` uses, built here too."""
    if not _CHECKOUT:
        sys.stderr.write(f"opsim: {_ROOT} is not a checkout of the repository: the native build is "
                         "made there (pip install -e . and make native); the engine runs as pure Python\n")
        return 1
    with _lock():
        return _build(opt_level)


def _build(opt_level: str) -> int:
    import shutil
    import subprocess

    tree = BUILD / "src"
    pkg = tree / "opsim"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for entry in (_ROOT / "opsim").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for layer in ("simulator", "kernels", "traces", "devices"):
        (pkg / layer).symlink_to(_ROOT / layer)
    lib, new, old = BUILD / "lib", BUILD / "lib.new", BUILD / "lib.old"
    for stale in (new, old):
        if stale.exists():
            shutil.rmtree(stale)
    if _FAILED.exists():
        _FAILED.unlink()
    cmd = [sys.executable, "-c", _SCRIPT, ",".join(MODULES), opt_level, str(BUILD / "tmp"), str(new)]
    env = {k: v for k, v in os.environ.items() if k != "CFLAGS"}
    wanted = _wanted()          # the sources being compiled
    proc = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    out = new / "opsim" / "simulator"
    artifacts = sorted(p.name for p in out.glob("*.so")) if out.is_dir() else []
    problem = None
    if proc.returncode or not artifacts:
        sys.stderr.write(proc.stdout[-4000:])
        problem = f"the native build failed (exit {proc.returncode})"
    elif _wanted() != wanted:
        problem = "a compiled source changed during the native build"
    if problem:
        sys.stderr.write(f"\nopsim: {problem}; the engine runs as pure Python\n")
        _FAILED.write_text(json.dumps(wanted) + "\n")
        for stale in (new, lib):    # never a build of other sources left behind
            if stale.exists():
                shutil.rmtree(stale)
        return proc.returncode or 1
    (out / "manifest.json").write_text(json.dumps({**wanted, "artifacts": artifacts}, indent=1) + "\n")
    # the complete build replaces the old one at once (a process importing meanwhile gets one
    # or the other, each checked against its manifest)
    if lib.exists():
        lib.rename(old)
    new.rename(lib)
    if old.exists():
        shutil.rmtree(old)
    return 0


def ensure() -> int:
    """Build unless a usable build exists, or a build of these very sources failed already."""
    why = _check()
    if why is None or why.startswith(PURE_ENV) or not _CHECKOUT:
        return 0
    require = os.environ.get(REQUIRE_ENV, "") not in ("", "0")
    try:
        with _lock():
            if _check() is None:    # built by another run while this one waited
                return 0
            if _failed_before() and not require:
                print(f"opsim: the native build failed for these sources before; pure Python "
                      f"({_FAILED}; python simulator/native.py build retries)")
                return 0
            rc = _build(os.environ.get("MYPYC_OPT_LEVEL", "3"))
    except OSError as exc:
        sys.stderr.write(f"opsim: the native build could not run ({exc}); the engine runs as pure Python\n")
        rc = 1
    return rc if require else 0


def _failed_before() -> bool:
    """Whether a build of exactly these sources, on this Python, failed (``failed.json``)."""
    try:
        failed = json.loads(_FAILED.read_text()) if _FAILED.is_file() else None
    except (OSError, ValueError):
        failed = None
    return failed == _wanted()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["ensure"]:
        return ensure()
    if args[:1] == ["build"]:
        return build(os.environ.get("MYPYC_OPT_LEVEL", "3"))
    if args[:1] in (["status"], []):
        print(json.dumps(status(), indent=1))
        return 0
    print(_USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
