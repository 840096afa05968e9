"""The operator registry: a custom operator's file that cannot be imported is a one-line error."""
from __future__ import annotations

import pytest

from opsim import cli
from opsim.kernels import registry
from opsim.sweep import StudyError, load_study

BROKEN = {
    "raises.py": ("import os\nx = 1 / 0\n", "ZeroDivisionError: division by zero", 2),
    "syntax.py": ("def (\n", "SyntaxError: invalid syntax", 1),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_file_that_cannot_be_imported_is_named_with_its_error_and_line(tmp_path, capsys, name):
    # the file's own exception escaped: a traceback from `opsim run --kernel`, `opsim check`,
    # `opsim ops`, `opsim capacity`, `opsim demo` and `opsim sweep`, status 1
    text, error, line = BROKEN[name]
    path = tmp_path / name
    path.write_text(text)
    spec = f"{path}:x"
    want = f"{path}:{line}: cannot import it: {error}"
    with pytest.raises(KeyError) as exc:
        registry.get(spec)
    assert exc.value.args[0] == want
    assert isinstance(exc.value.__cause__, (ZeroDivisionError, SyntaxError))   # kept for a debugger
    assert not registry.known(spec)
    for argv in (["run", "--kernel", spec], ["check", spec], ["ops", spec],
                 ["capacity", spec, "--device", "atlas-a2"],
                 ["demo", "--no-report", "--out", str(tmp_path / "d"), "--kernel", spec]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert want in err and err.count("\n") == 1, (argv, err)
    study = tmp_path / "s.toml"
    study.write_text(f'[axes]\noperator = ["{spec}"]\nshape = [[16]]\n')
    with pytest.raises(StudyError) as info:
        load_study(study)
    assert f"key 'axes.operator': {want}" in str(info.value)
