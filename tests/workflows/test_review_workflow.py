"""Derivative review in CI, end to end, as a team runs it: a small package of three modules
in a temporary folder, two of which export derivatives into one shared folder, and the
`s2s` command run in a subprocess.

emit → edit one line → `s2s check` fails (exit 1) with a diff of only the dependent lines →
re-emit → `s2s check` passes; a renamed export leaves an orphan that check reports and
emit removes (and only that one); a module that exports nothing fails.
"""
import os
import re

import pytest

from tests.helpers import run_s2s

LAYERS = '''\
import numpy as np


def layer(W, x):
    return np.tanh(x @ W)
'''

MODEL = '''\
import numpy as np
import s2s
from layers import layer


@s2s.export("f64[3,4], f64[5,3]", transforms=("primal", "grad"))
def loss(W, x):
    h = layer(W, x)
    return (h * h).sum()
'''

METRICS = '''\
import numpy as np
import s2s


@s2s.export("f64[6]", transforms=("grad",))
def energy(p):
    return (p * np.log(p)).sum()
'''


@pytest.fixture
def package(tmp_path):
    """The package, with both exporting modules' derivatives emitted into derivatives/."""
    for name, text in [("layers.py", LAYERS), ("model.py", MODEL), ("metrics.py", METRICS)]:
        (tmp_path / name).write_text(text)
    for module in ("model.py", "metrics.py"):
        emitted = s2s(tmp_path, "emit", module, "--out", "derivatives")
        assert emitted.returncode == 0, emitted.stderr
    return tmp_path


def s2s(folder, *args):
    return run_s2s(*args, cwd=str(folder))


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


def changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_emit_edit_check_fails_with_local_diff_reemit_check_passes(package):
    assert sorted(os.listdir(package / "derivatives")) == ["grad_energy.py", "grad_loss.py", "loss.py"]
    for module in ("model.py", "metrics.py"):
        assert s2s(package, "check", module, "--against", "derivatives").returncode == 0

    edit(package / "layers.py", "np.tanh(", "np.sin(")
    failed = s2s(package, "check", "model.py", "--against", "derivatives")
    assert failed.returncode == 1
    assert "2 generated files are stale" in failed.stdout
    changed = changed_lines(failed.stdout)
    # Only the lines computing the edited line and its derivative change, in both files:
    # each points at the edited line (`def layer`'s first), and nothing else is renumbered.
    assert changed and all(line.endswith("# layers.py layer+1") for line in changed), changed
    assert len(changed) <= 7, changed   # 3 lines out, 4 in (x @ W gets a name: sin reads it twice)
    # The other module's derivatives, in the same folder, do not depend on the edit.
    assert s2s(package, "check", "metrics.py", "--against", "derivatives").returncode == 0

    assert s2s(package, "emit", "model.py", "--out", "derivatives").returncode == 0
    passed = s2s(package, "check", "model.py", "--against", "derivatives")
    assert passed.returncode == 0, passed.stdout
    assert "2 generated files are up to date" in passed.stdout


def test_moving_a_function_down_its_file_leaves_the_derivatives_fresh(package):
    edit(package / "layers.py", "def layer", "# A dense layer.\n\n\ndef layer")
    edit(package / "model.py", "@s2s.export", "# Reviewed in CI.\n@s2s.export")
    checked = s2s(package, "check", "model.py", "--against", "derivatives")
    assert checked.returncode == 0, checked.stdout


def test_renamed_export_leaves_an_orphan_that_check_fails_on_and_emit_removes(package):
    edit(package / "model.py", "def loss(W, x):", "def objective(W, x):")
    failed = s2s(package, "check", "model.py", "--against", "derivatives")
    assert failed.returncode == 1
    orphans = sorted(re.findall(r"orphan (\S+):", failed.stdout))
    assert orphans == [os.path.join("derivatives", "grad_loss.py"), os.path.join("derivatives", "loss.py")]

    emitted = s2s(package, "emit", "model.py", "--out", "derivatives")
    assert emitted.returncode == 0, emitted.stderr
    assert sorted(re.findall(r"removed (\S+)", emitted.stdout)) == orphans
    # metrics.py's file in the shared folder is not model.py's orphan: it stays.
    assert sorted(os.listdir(package / "derivatives")) == ["grad_energy.py", "grad_objective.py", "objective.py"]
    for module in ("model.py", "metrics.py"):
        assert s2s(package, "check", module, "--against", "derivatives").returncode == 0


def test_module_without_exports_fails_check_and_emit(package):
    before = sorted(os.listdir(package / "derivatives"))
    for command in (["check", "layers.py", "--against", "derivatives"], ["emit", "layers.py", "--out", "derivatives"]):
        result = s2s(package, *command)
        assert result.returncode == 1
        assert "layers.py declares no @s2s.export" in result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(package / "derivatives")) == before


def test_check_fails_when_the_folder_is_empty_or_missing(package):
    result = s2s(package, "check", "model.py", "--against", "elsewhere")
    assert result.returncode == 1
    assert f"s2s check: missing {os.path.join('elsewhere', 'loss.py')}" in result.stdout
