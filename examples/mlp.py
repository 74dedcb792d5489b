"""A 2-layer tanh MLP loss over a params pytree: stage it, read it, emit it, check it.

    python examples/mlp.py

prints the jaxpr s2s stages the loss into, writes the readable module s2s emits for it to
examples/generated/mlp_loss.py, and checks that module (and s2s's reference interpreter)
against plain NumPy on random data. Then it compiles the loss and its gradient with XLA
(`s2s.jit`) and checks them against the same NumPy value and against the gradient's
emitted NumPy module.
"""
import os
import sys

import numpy as np

import s2s


def init_params(rng, sizes=(784, 512, 10), dtype=np.float32):
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"W{i}"] = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(dtype)
        params[f"b{i}"] = np.zeros(n_out, dtype)
    return params


def predict(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# What `s2s emit examples/mlp.py --out DIR` writes and `s2s check` keeps fresh: the loss,
# its gradient, value-and-gradient, forward- and reverse-mode derivative functions, and
# the per-example gradients (the loss of one example is the loss of a batch of one: the
# axes are counted from the end, so `loss` takes one example as well as a batch).
@s2s.export("{'W1': f32[784,512], 'b1': f32[512], 'W2': f32[512,10], 'b2': f32[10]}, "
            "f32[128,784], f32[128,10]",
            transforms=("primal", "grad", "value_and_grad", "jvp", "vjp", "per_example_grad"))
def loss(params, x, y):
    """Mean softmax cross-entropy of the MLP's predictions against one-hot labels `y`."""
    logp = log_softmax(predict(params, x))
    return -(y * logp).sum(axis=-1).mean()


def main(batch=128, sizes=(784, 512, 10), out_dir=None):
    rng = np.random.default_rng(0)
    params = init_params(rng, sizes)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]

    jaxpr = s2s.make_jaxpr(loss)(params, x, y)
    print(jaxpr)

    source = s2s.emit_python(loss, params, x, y)
    out_dir = out_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "generated")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "mlp_loss.py")
    with open(path, "w", newline="\n") as f:
        f.write(source)
    print(f"\nwrote {os.path.relpath(path)}:\n")
    print(source)

    expected = loss(params, x, y)
    (from_interpreter,) = s2s.eval_jaxpr(jaxpr, *s2s.tree_leaves((params, x, y)))
    namespace = {}
    exec(compile(source, path, "exec"), namespace)
    from_module = namespace["loss"](params, x, y)
    for what, value in [("eval_jaxpr", from_interpreter), ("emitted module", from_module)]:
        if np.asarray(value).dtype != np.asarray(expected).dtype or not np.allclose(value, expected, rtol=1e-5):
            sys.exit(f"MISMATCH: {what} gives {value!r}, NumPy gives {expected!r}")
    print(f"loss = {float(expected):.6f}: NumPy, eval_jaxpr and the emitted module agree")

    value, grads = s2s.jit(s2s.value_and_grad(loss))(params, x, y)   # XLA, through jaxlib
    numpy_grads = s2s.grad(loss)(params, x, y)                        # the emitted NumPy gradient
    if not np.allclose(value, expected, rtol=1e-5) or not all(
            np.allclose(grads[k], numpy_grads[k], rtol=1e-4, atol=1e-6) for k in params):
        sys.exit("MISMATCH: XLA's value_and_grad disagrees with NumPy")
    print(f"XLA: value_and_grad agrees; |dL/dW1| = {float(np.linalg.norm(grads['W1'])):.6f}")
    return expected, from_interpreter, from_module


if __name__ == "__main__":
    main()
