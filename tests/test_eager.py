"""s2s.eager: one staging entry point with clean errors, and one runner that emits a staged
function's module once and keeps it in the Staged's artifacts (jit(backend="python") and the
transforms called on NumPy values)."""
import numpy as np
import pytest

import s2s
from s2s import eager


def tanh_sum(x):
    return np.tanh(x).sum()


def broken(x):
    return x.no_such_method()


def test_transforms_emit_their_module_once_and_keep_it_in_the_staged_artifacts(monkeypatch):
    loaded = []
    original = eager.load_source
    monkeypatch.setattr(eager, "load_source", lambda *a: loaded.append(a[1]) or original(*a))
    x = np.linspace(-1.0, 1.0, 4)

    def loss(v):   # fresh for this test: nothing emitted for it yet
        return np.tanh(v).sum()
    for _ in range(3):
        np.testing.assert_allclose(s2s.grad(loss)(x), 1 - np.tanh(x) ** 2)
    assert len(loaded) == 1
    staged = eager.staged_or_error(loss, (x,), {})   # what grad(loss) derives from
    assert [key[1][0] for key in staged.artifacts if key[0] == "python"] == ["derived"]


def test_jit_python_and_vjp_share_the_runner(monkeypatch):
    loaded = []
    original = eager.load_source
    monkeypatch.setattr(eager, "load_source", lambda *a: loaded.append(a[1]) or original(*a))
    x = np.linspace(-1.0, 1.0, 4)

    def scale(v):
        return 3.0 * v
    f = s2s.jit(scale, backend="python")
    for _ in range(2):
        np.testing.assert_allclose(f(x), 3 * x)
        out, vjp_fn = s2s.vjp(scale, x)
        np.testing.assert_allclose(vjp_fn(np.ones(4))[0], 3.0)
    assert loaded == ["scale", "f", "f"]   # jit's module, vjp's forward and backward


def test_staged_or_error_raises_the_users_mistake_without_internal_frames():
    with pytest.raises(s2s.S2SError) as info:
        eager.staged_or_error(broken, (np.ones(2),), {})
    assert info.value.__cause__ is None
    assert not [entry for entry in info.traceback if "walker" in str(entry.path)]   # no staging frames


def test_emitted_call_args_canonicalize_to_the_staged_dtypes():
    with_x64_off = eager.staged_or_error(tanh_sum, (np.ones(2, np.float32),), {})
    signature = s2s.emit.signature.emitted_signature(with_x64_off)
    (arg,), _ = eager.emitted_call_args(with_x64_off, signature, (np.ones(2),), {}, canonicalize=True)
    assert arg.dtype == np.float32
