"""Emitted modules and printed jaxprs match the committed golden files byte for byte,
and the emitted source is the same in fresh processes with different hash seeds."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import s2s
from examples import mlp
from s2s.emit.python import load_source
from s2s.export import TRANSFORMS, Export, exports_of
from tests.golden.cases import CASES
from tests.golden.regenerate import DERIVATIVES, EXPORTING_MODULE, HERE, ROOT, golden_texts
from tests.helpers import with_numpy


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_golden_files(name):
    for filename, text in golden_texts(name).items():
        with open(os.path.join(HERE, filename)) as f:
            expected = f.read()
        assert text == expected, (f"tests/golden/{filename} is stale; if the change is intended, "
                                  "run `python -m tests.golden.regenerate` and review the diff")


def test_emitted_source_is_deterministic_across_hash_seeds():
    script = ("from tests.golden.regenerate import golden_texts; from tests.golden.cases import CASES;"
              "import sys; sys.stdout.write(''.join(t for n in sorted(CASES) for t in golden_texts(n).values()))")
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outputs.add(subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True,
                                   capture_output=True, text=True).stdout)
    assert len(outputs) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_modules_import_only_numpy_and_the_runtime_where_they_call_it(name):
    """A module that calls no runtime helper (`rt.`) runs where NumPy alone is installed."""
    source = golden_texts(name)[f"{name}.py"]
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    calls_runtime = re.search(r"\brt\.", source.split("\n__all__", 1)[1]) is not None
    assert imports == ["import numpy as np"] + (["import s2s_runtime as rt"] if calls_runtime else [])


def test_committed_derivative_files_are_fresh():
    """The CI review workflow: `s2s check` passes on the committed derivative files."""
    result = subprocess.run([sys.executable, "-m", "s2s", "check", EXPORTING_MODULE, "--against", DERIVATIVES],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 generated files are up to date" in result.stdout


def test_check_fails_with_a_diff_when_a_file_is_stale(tmp_path):
    subprocess.run([sys.executable, "-m", "s2s", "emit", EXPORTING_MODULE, "--out", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    stale = tmp_path / "grad_loss.py"
    stale.write_text(stale.read_text().replace("np.tanh", "np.sinh"))
    (tmp_path / "vjp_loss.py").unlink()
    result = subprocess.run([sys.executable, "-m", "s2s", "check", EXPORTING_MODULE, "--against", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "-    h = np.sinh(" in result.stdout and "+    h = np.tanh(" in result.stdout
    assert "missing" in result.stdout and "vjp_loss.py" in result.stdout


@pytest.mark.parametrize("filename", ["grad_loss.py", "value_and_grad_loss.py", "jvp_loss.py", "vjp_loss.py"])
def test_derivative_files_run_and_agree_with_autograd(filename):
    autograd = pytest.importorskip("autograd")
    import autograd.numpy as anp   # the oracle, optional
    with open(os.path.join(ROOT, DERIVATIVES, filename)) as f:
        module = load_source(f.read(), filename[:-3])
    rng = np.random.default_rng(0)
    params = mlp.init_params(rng)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    expected = autograd.grad(with_numpy(mlp.loss, anp))(params, x, y)
    fn = getattr(module, filename[:-3])
    if filename == "grad_loss.py":
        got = fn(params, x, y)
    elif filename == "value_and_grad_loss.py":
        value, got = fn(params, x, y)
        np.testing.assert_allclose(value, mlp.loss(params, x, y), rtol=1e-5)
    elif filename == "vjp_loss.py":
        value, (got, _, _) = fn(params, x, y, np.float32(1.0))
    else:
        direction = {k: np.ones_like(v) for k, v in params.items()}
        _, tangent = fn(params, x, y, direction, np.zeros_like(x), np.zeros_like(y))
        got_inner = sum(float(np.vdot(expected[k], direction[k])) for k in params)
        np.testing.assert_allclose(tangent, got_inner, rtol=1e-3)
        return
    for k in params:
        np.testing.assert_allclose(got[k], expected[k], rtol=2e-4, atol=1e-6)


def _derivative_sources():
    """(what, source) for every derivative `@s2s.export` can emit of the golden cases
    (grad and value_and_grad where the output is a scalar) and of examples/mlp.py."""
    # The golden cases are functions of one input, not losses over a batch of examples.
    batch_free = tuple(t for t in TRANSFORMS if t != "per_example_grad")
    records = [Export(fn, args, batch_free, name, 0) for name, (fn, args) in sorted(CASES.items())]
    records += exports_of(mlp)
    for record in records:
        for transform, (stem, target) in zip(record.transforms, record.targets()):
            if transform == "primal":
                continue
            try:
                yield stem, s2s.emit_python(target, *record.example_args(transform), name=stem)
            except s2s.StagingError as e:
                assert transform in ("grad", "value_and_grad") and "scalar" in str(e)


STATEMENT = re.compile(r"\s+(return \S|[\w\[\], .]+ = )")
PARAMETER_LEAF = re.compile(r"\s+\w+ = \w+(\[('\w+'|\d+)\]|\.\w+)+$")   # W1 = params['W1']


def test_every_statement_of_a_derivative_carries_its_source_line():
    """Accumulations (`shifted_bar = logp_bar + ...`) and loop bookkeeping too: a reviewer
    reading a derivative can follow each line back to the line of the user's code."""
    bare = []
    for stem, source in _derivative_sources():
        body = source.split("\ndef ", 1)[1].splitlines()[1:]
        for line in body:
            computes = STATEMENT.match(line) and not PARAMETER_LEAF.match(line) \
                and not re.match(r"\s+return [\w, ()\[\]{}':]+$", line)   # returns only names
            if computes and not re.search(r"  # \S+\.py \S+$", line):
                bare.append(f"{stem}: {line.strip()}")
    assert not bare, "\n".join(bare)
