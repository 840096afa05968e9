# The two commands: `make demo` and `make test`. Each creates .venv if missing and installs
# the project into it, so a fresh machine with only Python 3.11+ and the package index works.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo lint test test-slow test-pure native bench corpus docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The engine's hot modules compiled with mypyc into build/native (simulator/native.py): rebuilt
# when one of them changes (a build that failed is not retried for the same sources). Optional:
# if it cannot build (no C compiler), everything runs as pure Python, which the same source is
# (OPSIM_PURE_PYTHON=1 chooses it; OPSIM_REQUIRE_NATIVE=1 makes a failed build an error).
# NATIVE is the prerequisite that builds it: `make test NATIVE=` runs without the build step.
NATIVE ?= native
native: $(STAMP)
	$(BIN)/python simulator/native.py ensure

demo: $(NATIVE)
	$(BIN)/opsim demo

# ruff over the repository, then mypy over the installed package (.ci/typecheck builds the
# package layout as symlinks under build/ and keeps mypy's cache there). Fails on any finding.
lint: $(STAMP)
	$(BIN)/ruff check .
	MYPY=$(BIN)/mypy bash .ci/typecheck

# The default lane leaves out the tests marked slow (each ~5 s or more alone); CI (.ci/run)
# runs `make test` and then `make test-slow`, so every test runs there.
# Both lanes run on WORKERS processes (pytest-xdist), a test file per worker at a time so its
# module fixtures are built once; WORKERS=0 runs in this process.
WORKERS ?= 2
XDIST = $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile)

test: lint $(NATIVE)
	$(BIN)/python -m pytest -m "not slow" $(XDIST)

test-slow: $(NATIVE)
	$(BIN)/python -m pytest -m slow $(XDIST)

# The default lane once more with the engine as pure Python (CI runs it after the other two).
test-pure: $(STAMP)
	OPSIM_PURE_PYTHON=1 $(BIN)/python -m pytest -m "not slow" $(XDIST)

# Replays the regression corpus and lists differences (`python benchmarks/corpus.py --update`
# rewrites it on purpose, for a fidelity fix, with the reason in the commit).
corpus: $(NATIVE)
	$(BIN)/python benchmarks/corpus.py

bench: $(NATIVE)
	$(BIN)/python benchmarks/run.py

# Every figure of README.md and docs/ from a fresh run: the README blocks between
# <!-- figure: NAME --> markers and those of docs/profiling.md (opsim/docfigs.py), docs/calibration.md
# and docs/estimate.md.
docs: $(STAMP)
	$(BIN)/python benchmarks/calibrate.py > /dev/null
	$(BIN)/python benchmarks/estimate_error.py
	$(BIN)/python -m opsim.docfigs

clean:
	rm -rf $(VENV) opsim-out build *.egg-info
