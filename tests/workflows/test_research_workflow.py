"""Reading a gradient, end to end, as a researcher works: a small package of NumPy modules
in a temporary folder (a model importing its layers relatively, a static int and a defaulted
float argument, Python lists as input), and a script run in a subprocess that takes
`s2s.grad` of the loss, writes its readable module with `s2s.emit_python`, imports that
module back and calls it like the source function, and runs the same gradient compiled by
XLA (`s2s.jit`) and through the NumPy backend. Every result is checked against autograd;
the emitted file is read for what a reviewer looks for (the argument names, a location on
every statement, no import but numpy and s2s_runtime), and the edit-reload loop of a
notebook user gives the new gradient.
"""
import subprocess
import sys

from tests.helpers import CHECKOUT_PATH

LAYERS = '''\
import numpy as np


def dense(W, b, x):
    return np.tanh(x @ W + b)
'''

MODEL = '''\
import numpy as np

from .layers import dense


def loss(params, x, n_layers, scale=0.5):
    h = x
    for _ in range(n_layers):
        h = dense(params["W"], params["b"], h)
    return scale * np.sum(h ** 2)
'''

SCRIPT = '''\
import importlib
import os
import sys

import autograd
import autograd.numpy as anp
import numpy as np

import s2s
from research import model

rng = np.random.default_rng(0)
params = {"W": rng.standard_normal((4, 4)) / 2, "b": rng.standard_normal(4) / 4}
x = rng.standard_normal((3, 4))


def oracle(params, x, n_layers, scale=0.5, activation=anp.tanh):
    h = x
    for _ in range(n_layers):
        h = activation(h @ params["W"] + params["b"])
    return scale * anp.sum(h ** 2)


expected = autograd.grad(oracle)(params, x, 3)
grad_loss = s2s.grad(model.loss)
results = {"eager": grad_loss(params, x, 3),
           "xla": s2s.jit(grad_loss, static_argnums=2)(params, x, 3),
           "numpy backend": s2s.jit(grad_loss, static_argnums=2, backend="python")(params, x, 3)}

source = s2s.emit_python(grad_loss, params, x, 3)
with open("grad_loss.py", "w") as f:
    f.write(source)
sys.path.insert(0, os.getcwd())
emitted = importlib.import_module("grad_loss")
results["emitted module"] = emitted.grad_loss(params, x.tolist(), 3)   # lists, as NumPy takes
for how, got in results.items():
    for key in ("W", "b"):
        np.testing.assert_allclose(np.asarray(got[key]), expected[key], rtol=1e-10, atol=1e-12,
                                   err_msg=how)
try:
    emitted.grad_loss(params, x, 4)
    raise SystemExit("the emitted gradient ran for n_layers=4, specialized for 3")
except ValueError as e:
    assert "n_layers=4" in str(e) and "specialized for n_layers=3" in str(e), e

body = source.split("def grad_loss(", 1)[1]
assert body.startswith("params, x, n_layers=3, scale=0.5):"), body.splitlines()[0]
imports = sorted({line for line in source.splitlines() if line.startswith(("import ", "from "))})
assert imports == ["import numpy as np"], imports   # (it calls no runtime helper)
statements = [line for line in body.splitlines()[1:] if " = " in line and "params[" not in line]
assert statements and all("# " in line and "+" in line.split("# ")[-1] for line in statements), \\
    [line for line in statements if "# " not in line]
# The gradient of argument W is W_bar, also when a loop accumulates it.
assert "return {'W': W_bar, 'b': b_bar}" in source, source

# The notebook loop: edit the helper, reload both modules, the new gradient follows.
layers_path = os.path.join("research", "layers.py")
with open(layers_path) as f:
    text = f.read()
with open(layers_path, "w") as f:
    f.write(text.replace("np.tanh(x @ W + b)", "np.sin(x @ W + b)"))
from research import layers
importlib.reload(layers)
importlib.reload(model)


expected = autograd.grad(oracle)(params, x, 3, activation=anp.sin)
got = s2s.grad(model.loss)(params, x, 3)
np.testing.assert_allclose(got["W"], expected["W"], rtol=1e-10, atol=1e-12)
print("ok")
'''


def test_a_researcher_reads_runs_and_edits_a_gradient(tmp_path):
    package = tmp_path / "research"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(LAYERS)
    (package / "model.py").write_text(MODEL)
    (tmp_path / "script.py").write_text(SCRIPT)
    result = subprocess.run([sys.executable, "-B", "script.py"], cwd=tmp_path, capture_output=True,
                            text=True, env={"PYTHONPATH": f"{CHECKOUT_PATH}:{tmp_path}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
