"""Where a sweep writes, what it may replace, and workers that do not outlive the sweep.

- :func:`database_path`: the database goes where the caller says (``sweep(..., database)``,
  ``--db``); otherwise into the working directory, under the study's ``database`` (a relative
  path that stays inside the working directory) or ``<name>.sqlite`` (the name made a plain
  file name). A study file never points the database elsewhere.
- :func:`check_existing`: an existing file is reused (``resume``) or replaced (``overwrite``)
  only if it is an opsim sweep database of the same study; resuming also needs the same study
  content (the hash in the database's meta table), so an edited study never mixes its rows
  with the old ones.
- :func:`watch_parent`: the initializer of local worker processes; a worker exits as soon as
  the process that started it is gone (a SIGKILLed sweep leaves no workers behind). It polls
  ``os.getppid()``, which works on every POSIX system without prctl.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path, PurePath
from typing import Any

__all__ = ["database_path", "check_existing", "study_hash", "device_file_digests", "watch_parent",
           "read_meta"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_CREATOR = "opsim.sweep"


def _error(message: str) -> Exception:
    """A StudyError whose ``{db}``, ``{resume}``, ... name the sweep's options (StudyError.naming_options)."""
    from opsim.sweep import StudyError  # the sweep module imports this one
    return StudyError.naming_options(message)


def safe_file_name(name: str) -> str:
    """``name`` as a plain file name: no directories, no leading dot, no '..'."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".")
    return out or "study"


def database_path(study: Any, database: str | Path | None) -> Path:
    """The database file of a sweep (see the module docstring)."""
    if database is not None:
        return Path(database)
    if study.database is None:
        return Path(f"{safe_file_name(study.name)}.sqlite")
    where = f"{study.source}: key 'study.database'"
    p = PurePath(study.database)
    if p.is_absolute() or p.drive or p.root or ".." in p.parts or not p.parts:
        raise _error(f"{where}: {study.database!r} must be a relative path inside the working "
                     f"directory (no absolute path, no '..'); pass {{db}} to write elsewhere")
    cwd = Path.cwd().resolve()
    resolved = (cwd / p).resolve()
    if not resolved.is_relative_to(cwd):   # e.g. through a symbolic link
        raise _error(f"{where}: {study.database!r} leads outside the working directory (to {resolved}); "
                     f"pass {{db}} to write elsewhere")
    return Path(p)


def study_hash(study: Any) -> str:
    """sha256 of what decides a study's rows in its own file: axes (in order), mode, seed, fixed
    operands (the device files it names are recorded apart: :func:`device_file_digests`)."""
    doc = {"axes": [[k, list(v)] for k, v in study.axes], "mode": study.mode, "seed": study.seed,
           "operands": {k: dict(v) for k, v in sorted(study.operands.items())}}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def device_files(study: Any) -> list[str]:
    """The device axis's entries that are device files, not catalogue names, in axis order."""
    from opsim.devices import catalogue
    known = set(catalogue())
    return [d for d in dict(study.axes).get("device", ()) if isinstance(d, str) and d not in known]


def device_file_digests(study: Any) -> str:
    """JSON {file: sha256 of its bytes} of the device files the study names: they decide its rows
    as much as its axes do, so an edited file refuses a resume (recorded as the meta key
    ``device_files``)."""
    return json.dumps({name: _file_digest(name) for name in device_files(study)}, sort_keys=True,
                      separators=(",", ":"))


def _file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None    # unreadable: the sweep refuses the study when it loads the device


def read_meta(path: Path) -> dict[str, str] | None:
    """The meta table of an opsim sweep database; None if the file is SQLite but not ours.

    Raises the sweep's StudyError if the file is not SQLite at all and sqlite3.DatabaseError if
    it is damaged."""
    with path.open("rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise _error(f"{path} exists and is not an SQLite database; opsim neither writes into nor "
                     f"replaces a file it did not create: give another {{db}} or remove it")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "points"} <= tables:
            return None
        meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        if "schema" not in meta or "study" not in meta:
            return None
        meta["_rows"] = str(conn.execute("SELECT COUNT(*) FROM points").fetchone()[0])
        return meta
    finally:
        conn.close()


def check_existing(path: Path, study: Any, *, resume: bool, overwrite: bool) -> None:
    """Refuse to touch an existing ``path`` unless it is this study's own database (see above);
    with ``overwrite`` (and not ``resume``), delete it so the sweep starts afresh."""
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_file():
        raise _error(f"{path} exists and is not a regular file; give another {{db}}")
    if path.stat().st_size == 0:
        return   # an empty file is an empty SQLite database (e.g. made by a reader polling for it)
    meta = read_meta(path)
    if meta is None:
        raise _error(f"{path} is an SQLite database that opsim did not create (no sweep meta table); "
                     f"opsim neither writes into nor replaces it: give another {{db}}")
    if meta["study"] != study.name:
        raise _error(f"{path} holds the results of study {meta['study']!r}, not {study.name!r}; "
                     f"{{overwrite}} replaces only a database of the same study: give another {{db}}")
    rows = int(meta["_rows"])
    if resume:
        if "study_hash" in meta:
            same = meta["study_hash"] == study_hash(study)
        else:  # written before the hash was recorded: compare the axes it did record
            axes = json.dumps([[k, list(v)] for k, v in study.axes], sort_keys=True, separators=(",", ":"),
                              default=str)
            same = meta.get("axes") == axes
        if not same and rows:
            raise _error(f"{path}: study {study.name!r} has changed since its {rows} rows were written "
                         f"(axes, mode, seed or operands differ); resuming would mix old and new points. "
                         f"Use {{overwrite}} to start again or another {{db}} to keep both")
        # a database written before the files were recorded has no entry: nothing to compare
        if rows and "device_files" in meta:
            before = json.loads(meta["device_files"])
            now = json.loads(device_file_digests(study))
            changed = [f for f in now if f in before and before[f] != now[f]]
            if changed:
                raise _error(f"{path}: device file{'s' if len(changed) > 1 else ''} {', '.join(changed)} of "
                             f"study {study.name!r} {'have' if len(changed) > 1 else 'has'} changed since its "
                             f"{rows} rows were written; resuming would mix points of the old and the new "
                             f"device. Use {{overwrite}} to start again or another {{db}} to keep both")
        return
    if not rows:
        return
    if not overwrite:
        raise _error(f"{path} already holds results; {{resume}} continues it, {{overwrite}} starts it again")
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def _watch(parent: int, period: float) -> None:
    while True:
        time.sleep(period)
        if os.getppid() != parent:
            os._exit(1)   # the sweep is gone: nobody will read this worker's result


def watch_parent(parent: int, period: float = 0.2) -> None:
    """Worker initializer: exit this process when ``parent`` (the sweep) is no longer its parent."""
    threading.Thread(target=_watch, args=(parent, period), name="opsim-watch-parent", daemon=True).start()
