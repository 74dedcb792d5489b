"""The `s2s` command in the user's own repository, run as the installed command runs there:
a package `mypkg/` whose modules import each other relatively and absolutely, parameters
as dicts, a git history, and nothing on sys.path but s2s itself (`run_s2s_in`: no
PYTHONPATH for the user's package, the working folder not on sys.path).

emit → commit → `s2s check` passes (from the root and from inside the package) → edit one
line of the model → `s2s check --format github` exits 1 with an annotation at the line git
says was edited → the fix command it prints, run as printed, makes it pass again. And
`s2s compile` of the same package leaves only the build's files in the build folder.
"""
import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest

from s2s.emit.python import load_source
from tests.helpers import run_s2s_in

HELPERS = '''\
import numpy as np


def dense(params, x):
    return np.tanh(x @ params["W"] + params["b"])
'''

MODEL = '''\
import numpy as np
import s2s

from .helpers import dense

SPEC = "{'W': f64[4,3], 'b': f64[3]}, f64[5,4]"


@s2s.export(SPEC, transforms=("grad",))
def loss(params, x):
    h = dense(params, x)
    return (h * h).sum()
'''

METRICS = '''\
import numpy as np
import s2s

from mypkg.helpers import dense


@s2s.export("{'W': f64[4,3], 'b': f64[3]}, f64[5,4]", transforms=("grad",))
def spread(params, x):
    return dense(params, x).var()
'''


def git(repository, *args) -> str:
    result = subprocess.run(["git", "-c", "user.name=CI", "-c", "user.email=ci@example.com", *args],
                            cwd=repository, capture_output=True, text=True, check=True)
    return result.stdout


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The user's repository with its derivatives emitted and everything committed."""
    repository = tmp_path_factory.mktemp("repository")
    (repository / "mypkg").mkdir()
    for name, text in [("__init__.py", ""), ("helpers.py", HELPERS), ("model.py", MODEL), ("metrics.py", METRICS)]:
        (repository / "mypkg" / name).write_text(text)
    for module in ("mypkg/model.py", "mypkg/metrics.py"):
        emitted = run_s2s_in(repository, "emit", module, "--out", "derivatives/")
        assert emitted.returncode == 0, emitted.stderr
    git(repository, "init", "-q")
    git(repository, "add", ".")
    git(repository, "commit", "-qm", "model and its reviewed derivatives")
    return repository


@pytest.fixture
def repository(committed, tmp_path):
    """A copy of the committed repository (history included) for one test to change."""
    copy = tmp_path / "repository"
    shutil.copytree(committed, copy)
    return copy


def test_committed_derivatives_check_from_the_root_and_from_inside_the_package(committed):
    assert sorted(os.listdir(committed / "derivatives")) == ["grad_loss.py", "grad_spread.py"]
    from_root = run_s2s_in(committed, "check", "mypkg/", "--against", "derivatives/", "--format", "github")
    assert from_root.returncode == 0, from_root.stdout + from_root.stderr
    assert "2 generated files are up to date" in from_root.stdout and "::error" not in from_root.stdout
    inside = run_s2s_in(committed / "mypkg", "check", "model.py:loss", "--against", "../derivatives")
    assert inside.returncode == 0, inside.stdout + inside.stderr


def test_emitted_gradient_matches_finite_differences(committed):
    """What the reviewer reads is the gradient: of loss, with the parameters as a dict."""
    module = load_source((committed / "derivatives" / "grad_loss.py").read_text(), "grad_loss")
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    x = rng.standard_normal((5, 4))

    def loss(p):
        h = np.tanh(x @ p["W"] + p["b"])
        return (h * h).sum()
    grads = module.grad_loss(params, x)
    for key in params:
        numeric = np.zeros_like(params[key])
        for index in np.ndindex(params[key].shape):
            step = np.zeros_like(params[key])
            step[index] = 1e-6
            up, down = dict(params), dict(params)
            up[key], down[key] = params[key] + step, params[key] - step
            numeric[index] = (loss(up) - loss(down)) / 2e-6
        np.testing.assert_allclose(grads[key], numeric, rtol=1e-6, atol=1e-8)


def test_an_edit_fails_check_with_an_annotation_at_the_edited_line_and_the_printed_fix_works(repository):
    model = repository / "mypkg" / "model.py"
    model.write_text(model.read_text().replace("(h * h).sum()", "(h * h).mean()"))
    # The line git shows as edited in the pull request: `@@ -12 +12 @@`.
    [edited] = [int(n) for n in re.findall(r"^@@ -\d+(?:,\d+)? \+(\d+) @@", git(repository, "diff", "-U0"), re.M)]

    failed = run_s2s_in(repository, "check", "--format", "github", "mypkg/", "--against", "derivatives/")
    assert failed.returncode == 1, failed.stderr
    annotations = re.findall(r"^::error file=([^,]+),line=(\d+),title=s2s check::(.*)$", failed.stdout, re.M)
    assert ("mypkg/model.py", str(edited)) in [(path, line) for path, line, _ in annotations], failed.stdout
    # Every annotation is a line of the model's own derivative (the edited line, and the
    # helper's line, where the emitted code sums the now scaled cotangent of `h`), never
    # one of metrics', whose derivative did not change.
    assert {path for path, _, _ in annotations} <= {"mypkg/model.py", "mypkg/helpers.py"}
    assert all("derivatives/grad_loss.py" in message for _, _, message in annotations)

    [fix] = re.findall(r"regenerate with `([^`]+)`", failed.stdout)
    fixed = run_s2s_in(repository, *shlex.split(fix)[1:])
    assert fixed.returncode == 0, fixed.stderr
    assert git(repository, "status", "--porcelain").split() == ["M", "derivatives/grad_loss.py",
                                                               "M", "mypkg/model.py"]
    passed = run_s2s_in(repository, "check", "mypkg/", "--against", "derivatives/")
    assert passed.returncode == 0, passed.stdout


def test_compile_builds_the_package_and_leaves_no_lock_file(repository):
    built = run_s2s_in(repository, "compile", "mypkg/", "--out", "build", "--no-verify")
    assert built.returncode == 0, built.stderr
    files = os.listdir(repository / "build")
    assert "manifest.json" in files and not [f for f in files if f.endswith(".lock")], files
    missing = run_s2s_in(repository, "compile", "mypkg/nonexistent.py", "--out", "build")
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
