"""Settings for every test process, made before any test module imports numpy."""
from __future__ import annotations

import os

# One OpenBLAS thread per test process. The tests' matmuls are small (goldens, fp64 truths,
# the cube's numerics at test shapes), and OpenBLAS's worker threads spin while they wait for
# the next one: on 2 cores shared by 2 xdist workers a 17 x 64 x 4096 golden cost 0.1 s of CPU
# with the default threads against 0.001 s with one. setdefault: a value set by hand wins.
# Subprocesses the tests start (the CLI tests) inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
