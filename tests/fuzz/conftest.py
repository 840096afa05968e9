"""The end-of-session counts of the fuzz suites (see fuzz_harness.py for the profiles)."""
from __future__ import annotations

from fuzz_harness import COUNTS, FINDINGS


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest hook
    if not COUNTS:
        return
    tr = terminalreporter
    tr.section("opsim fuzz counts")
    for key in sorted(COUNTS):
        tr.write_line(f"{key:48s} {COUNTS[key]}")
    for line in FINDINGS[:20]:
        tr.write_line(f"finding: {line}")
