"""The README's table of commands names every option `opsim <command> --help` shows."""
from __future__ import annotations

import argparse
import pathlib
import re

from opsim.cli import build_parser

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
# --override is the deprecated spelling of --set (the help says so); --help is everywhere
NOT_LISTED = {"-h", "--help", "--override"}


def _commands(parser: argparse.ArgumentParser, prefix: str = "opsim") -> dict[str, argparse.ArgumentParser]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    out.update(_commands(sub, f"{prefix} {name}"))
                else:
                    out[f"{prefix} {name}"] = sub
    return out


def test_every_option_of_every_command_is_in_the_readme_table():
    rows = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.startswith("| `opsim ")]
    missing = []
    for command, sub in _commands(build_parser()).items():
        text = " ".join(r for r in rows if re.match(rf"\| `{re.escape(command)}\b", r))
        assert text, f"the README's table has no row for `{command}`"
        for action in sub._actions:
            opts = [o for o in action.option_strings if o not in NOT_LISTED]
            # an option is listed under any of its spellings (-o for --output)
            if opts and not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in opts):
                missing.append(f"{command} {opts[-1]}")
    assert not missing, f"options missing from the README's command table: {missing}"
