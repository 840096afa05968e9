"""Installed, opsim claims one import name: its layers are opsim.devices/.traces/.simulator/.kernels."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_no_generic_top_level_name_is_ours_and_the_layers_import_under_opsim(tmp_path):
    # run outside the repository, so only what is installed can be found
    code = (
        "import importlib.util, json\n"
        "names = ['kernels', 'simulator', 'traces', 'devices']\n"
        "found = {n: importlib.util.find_spec(n) is not None for n in names}\n"
        "import opsim, opsim.kernels, opsim.simulator, opsim.traces, opsim.devices\n"
        "import opsim.kernels.ascend.mse_backward\n"
        "print(json.dumps({'generic': found, 'catalogue': opsim.devices()[:1],"
        " 'load': opsim.devices.load('atlas-a2').name}))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # nothing of ours answers to a generic name (another package of that name may be installed,
    # such as Hugging Face's `kernels`: then it must not be one of our folders)
    for name, present in out["generic"].items():
        if present:
            where = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.__file__)"],
                                   cwd=tmp_path, capture_output=True, text=True).stdout.strip()
            assert not where.startswith(str(ROOT)), f"import {name} finds our folder {where}"
    # opsim.devices is both the subpackage and the catalogue callable of the public API
    assert out["catalogue"] and out["load"] == "atlas-a2"
