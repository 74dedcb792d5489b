"""`s2s.checkpoint` (s2s/remat.py): gradients under every policy equal the unchecked gradient
and jax's with `jax.checkpoint` of the same code, on both backends; nesting; what
`print_saved_residuals` reports against jax's own; the saving XLA keeps; errors."""
import contextlib
import functools
import io
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import s2s
from s2s_runtime import xla
from s2s_runtime.compile_options import placement

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax.ad_checkpoint import checkpoint_name as jax_checkpoint_name  # noqa: E402
from jax.ad_checkpoint import print_saved_residuals as jax_print_saved_residuals  # noqa: E402

cp, jcp = s2s.checkpoint_policies, jax.checkpoint_policies

# (name, s2s policy, jax policy); None: no checkpoint at all.
POLICIES = [
    ("everything_saveable", cp.everything_saveable, jcp.everything_saveable),
    ("nothing_saveable", cp.nothing_saveable, jcp.nothing_saveable),
    ("dots_saveable", cp.dots_saveable, jcp.dots_saveable),
    ("dots_with_no_batch_dims_saveable", cp.dots_with_no_batch_dims_saveable,
     jcp.dots_with_no_batch_dims_saveable),
    ("save_only_these_names", cp.save_only_these_names("pre"), jcp.save_only_these_names("pre")),
    ("save_anything_except_these_names", cp.save_anything_except_these_names("pre"),
     jcp.save_anything_except_these_names("pre")),
    ("save_from_both_policies", cp.save_from_both_policies(cp.dots_saveable, cp.save_only_these_names("pre")),
     jcp.save_from_both_policies(jcp.dots_saveable, jcp.save_only_these_names("pre"))),
]


class Library:
    """What a model is written with: s2s or jax, and checkpointed with a policy or not."""

    def __init__(self, kind: str, policy=None):
        self.kind = kind
        self.np = np if kind == "s2s" else jnp
        self.lax = s2s.lax if kind == "s2s" else jax.lax
        self.name = s2s.checkpoint_name if kind == "s2s" else jax_checkpoint_name
        if policy is None:
            self.checkpoint = lambda f: f
        elif kind == "s2s":
            self.checkpoint = functools.partial(s2s.checkpoint, policy=policy)
        else:
            self.checkpoint = functools.partial(jax.checkpoint, policy=policy)


def mlp(lib):
    np_, checkpoint, name = lib.np, lib.checkpoint, lib.name

    def layer(h, W, b):
        return np_.tanh(name(h @ W + b, "pre"))
    layer = checkpoint(layer)

    def loss(h, Ws, bs):
        for W, b in zip(Ws, bs):
            h = layer(h, W, b)
        return (h * h).sum()
    return loss


def rnn(lib):
    np_, checkpoint, name, lax = lib.np, lib.checkpoint, lib.name, lib.lax

    def step(h, x, Wh, Wx):
        h = np_.tanh(name(h @ Wh, "pre") + x @ Wx)
        return h, np_.sin(h)

    def loss(h, Wh, Wx, xs):
        h, ys = lax.scan(checkpoint(lambda h, x: step(h, x, Wh, Wx)), h, xs)
        return (h * h).sum() + ys.sum()
    return loss


def attention(lib):
    np_, checkpoint, name = lib.np, lib.checkpoint, lib.name

    def block(x, Wq, Wk, Wv):
        q, k, v = x @ Wq, x @ Wk, x @ Wv                 # heads, seq, d
        scores = name(q @ k.transpose(0, 2, 1), "pre") / np_.sqrt(q.shape[-1])
        p = np_.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        return np_.tanh(p @ v)

    def loss(x, Wq, Wk, Wv):
        return (checkpoint(block)(x, Wq, Wk, Wv) ** 2).sum()
    return loss


def _floats(rng, *shape, scale=0.5):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def model_args(model, seed=0, width=6):
    rng = np.random.default_rng(seed)
    if model is mlp:
        return (_floats(rng, 4, width), [_floats(rng, width, width) for _ in range(3)],
                [_floats(rng, width) for _ in range(3)])
    if model is rnn:
        return _floats(rng, 2, width), _floats(rng, width, width), _floats(rng, 3, width), _floats(rng, 5, 2, 3)
    return _floats(rng, 2, 5, width), _floats(rng, width, 4), _floats(rng, width, 4), _floats(rng, width, 4)


def _close(actual, expected, tol=2e-5):
    for a, e in zip(s2s.tree_leaves(actual), s2s.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=tol, atol=tol)


def _grads(model, lib, args, backend):
    argnums = tuple(range(len(args)))
    if lib.kind == "jax":
        return jax.grad(model(lib), argnums=argnums)(*args)
    derivative = s2s.grad(model(lib), argnums=argnums)
    return s2s.jit(derivative)(*args) if backend == "jit" else derivative(*args)


@pytest.mark.parametrize("backend", ["python", "jit"])
@pytest.mark.parametrize("model", [mlp, rnn, attention])
@pytest.mark.parametrize("policy_name,policy,jax_policy", POLICIES, ids=[p[0] for p in POLICIES])
def test_gradients_under_every_policy_equal_the_unchecked_ones_and_jax(model, policy_name, policy, jax_policy,
                                                                        backend):
    args = model_args(model)
    got = _grads(model, Library("s2s", policy), args, backend)
    _close(got, _grads(model, Library("s2s"), args, backend))
    _close(got, _grads(model, Library("jax", jax_policy), args, backend), tol=1e-4)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), width=st.integers(1, 7), policy=st.sampled_from(POLICIES))
def test_a_checkpointed_mlp_differentiates_as_the_plain_one(seed, width, policy):
    args = model_args(mlp, seed, width)
    _close(_grads(mlp, Library("s2s", policy[1]), args, "python"), _grads(mlp, Library("s2s"), args, "python"))


# ---------------------------------------------------------------------------------------
# Calling conventions


def _inner(h, W):
    return np.sin(h @ W)


def test_on_numpy_values_it_just_runs_the_function():
    h, W = model_args(rnn)[:2]
    np.testing.assert_array_equal(s2s.checkpoint(_inner)(h, W), _inner(h, W))
    np.testing.assert_array_equal(s2s.remat(policy=cp.dots_saveable)(_inner)(h, W), _inner(h, W))


def test_usable_as_a_decorator_bare_or_with_arguments():
    @s2s.checkpoint
    def bare(x):
        return np.sin(x) * x

    @s2s.checkpoint(policy=cp.dots_saveable, prevent_cse=False)
    def configured(x):
        return np.sin(x) * x
    x = np.float32(0.3)
    assert s2s.grad(bare)(x) == pytest.approx(s2s.grad(configured)(x)) == pytest.approx(np.cos(x) * x + np.sin(x))


def test_static_argnums_are_python_values_fixed_at_staging():
    def power(x, n):
        for _ in range(n):
            x = np.sin(x)
        return x
    checkpointed = s2s.checkpoint(power, static_argnums=(1,))
    x = np.float32(0.4)
    got = s2s.grad(lambda x: checkpointed(x, 3))(x)
    assert got == pytest.approx(s2s.grad(lambda x: power(x, 3))(x))


def _scaled_power(x, n, scale):
    """Branches on `scale`, a Python float: a value fixed at staging, named static."""
    if scale > 0:
        return np.sin(x) ** n * scale
    return np.cos(x)


@pytest.mark.parametrize("statics", [dict(static_argnames="scale"), dict(static_argnames=("scale", "n")),
                                     dict(static_argnums=2)])
@pytest.mark.parametrize("by_keyword", [False, True])
def test_static_arguments_by_name_or_position_given_either_way_match_jax(statics, by_keyword):
    checkpointed = s2s.checkpoint(_scaled_power, **statics)
    theirs = jax.checkpoint(lambda x, n, scale: jnp.sin(x) ** n * scale, **statics)

    def loss(x):
        return checkpointed(x, 3, scale=2.0) if by_keyword else checkpointed(x, 3, 2.0)
    expected = jax.grad(lambda x: theirs(x, 3, 2.0))(0.7)
    assert s2s.grad(loss)(0.7) == pytest.approx(float(expected), rel=1e-12)
    assert float(s2s.jit(s2s.grad(loss))(0.7)) == pytest.approx(float(expected), rel=1e-12)


def test_concrete_which_jax_removed_is_refused_with_its_replacement():
    with pytest.raises(TypeError, match="`concrete` option was removed from JAX") as caught:
        s2s.checkpoint(_scaled_power, concrete=True)
    assert "static_argnums" in str(caught.value)


# ---------------------------------------------------------------------------------------
# Nesting


def _nested(x, W):
    def outer(h, W):
        return np.tanh(s2s.checkpoint(_inner)(h, W) @ W)
    return s2s.checkpoint(outer, policy=cp.dots_saveable)(x, W).sum()


def _nested_plain(x, W):
    return np.tanh(np.sin(x @ W) @ W).sum()


def _in_cond(x, W):
    return s2s.lax.cond(x.sum() > 0, s2s.checkpoint(_inner), lambda x, W: x * 2.0, x, W).sum()


def _in_cond_plain(x, W):
    return s2s.lax.cond(x.sum() > 0, _inner, lambda x, W: x * 2.0, x, W).sum()


def _in_python_loop(x, W):
    for _ in range(3):
        x = s2s.checkpoint(_inner)(x, W)
    return x.sum()


def _in_python_loop_plain(x, W):
    for _ in range(3):
        x = _inner(x, W)
    return x.sum()


@pytest.mark.parametrize("backend", ["python", "jit"])
@pytest.mark.parametrize("checked,plain", [(_nested, _nested_plain), (_in_cond, _in_cond_plain),
                                           (_in_python_loop, _in_python_loop_plain)],
                         ids=["checkpoint_in_checkpoint", "in_cond_branch", "in_loop_body"])
def test_checkpoint_nests(checked, plain, backend):
    x, W = model_args(rnn)[:2]
    for sign in (1, -1):      # both branches of the cond
        wrap = s2s.jit if backend == "jit" else (lambda f: f)
        _close(wrap(s2s.grad(checked, (0, 1)))(sign * x, W), s2s.grad(plain, (0, 1))(sign * x, W))


def _scalar(x):
    return s2s.checkpoint(lambda x: np.sin(np.sin(x)) * x)(x)


def _scalar_plain(x):
    return np.sin(np.sin(x)) * x


def test_higher_order_vmap_and_forward_mode_through_checkpoint():
    x = np.linspace(-1, 1, 5).astype(np.float32)
    _close(s2s.grad(s2s.grad(_scalar))(x[1]), s2s.grad(s2s.grad(_scalar_plain))(x[1]))
    _close(s2s.jit(s2s.grad(s2s.grad(_scalar)))(x[1]), jax.grad(jax.grad(lambda x: jnp.sin(jnp.sin(x)) * x))(x[1]))
    _close(s2s.vmap(s2s.grad(_scalar))(x), s2s.vmap(s2s.grad(_scalar_plain))(x))
    _close(s2s.jit(s2s.vmap(s2s.grad(_scalar)))(x), s2s.vmap(s2s.grad(_scalar_plain))(x))
    _close(s2s.jvp(_scalar, (x,), (x,)), s2s.jvp(_scalar_plain, (x,), (x,)))
    _close(s2s.hessian(lambda x: _scalar(x).sum())(x), s2s.hessian(lambda x: _scalar_plain(x).sum())(x))


# ---------------------------------------------------------------------------------------
# What is saved


def _named_block(x, W):
    def block(x, W):
        a = s2s.checkpoint_name(np.sin(x @ W), "a")
        return np.tanh(a @ W)
    return s2s.checkpoint(block, policy=cp.save_only_these_names("a"))(x, W).sum()


def test_save_only_these_names_saves_the_named_value_and_recomputes_the_rest():
    x, W = model_args(rnn)[:2]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        saved = s2s.print_saved_residuals(_named_block, x, W)
    assert [r.source.split(" at ")[0] for r in saved] == ["argument x", "argument W", "name"]
    assert saved[2].type == "f32[2,6]" and saved[2].nbytes == 48
    assert "total: 3 residuals" in out.getvalue()
    _close(s2s.grad(_named_block, (0, 1))(x, W), s2s.grad(_nested_plain, (0, 1))(x, W))


def _scan_under(policy, lib=np, scan=s2s.lax.scan, checkpoint=s2s.checkpoint):
    def steps(W, x):
        return scan(lambda y, _: (lib.sin(W @ y), None), x, None, length=50)[0]

    def loss(W, x):
        return checkpoint(steps, policy=policy)(W, x).sum()
    return loss


@pytest.mark.parametrize("policy, per_step", [("dots_saveable", True), ("nothing_saveable", False)])
def test_a_policy_decides_inside_the_loops_of_its_checkpoint(policy, per_step):
    """dots_saveable around a scan saves each step's dot product (and the carry its
    transpose reads), stacked; nothing_saveable saves only the inputs and recomputes the
    whole loop in the backward pass."""
    W, x = np.eye(8) * 0.3 + 0.01, np.linspace(-1, 1, 8)
    loss = _scan_under(getattr(cp, policy))
    with contextlib.redirect_stdout(io.StringIO()):
        saved = s2s.print_saved_residuals(loss, W, x)
    stacked = [r for r in saved if r.type == "f64[50,8]"]
    assert bool(stacked) == per_step, saved
    assert [r.source for r in saved if r not in stacked] == ["argument W"] + ([] if per_step else ["argument x"])
    jax_loss = _scan_under(getattr(jax.checkpoint_policies, policy), jax.numpy, jax.lax.scan, jax.checkpoint)
    for backend in (s2s.grad, lambda f: s2s.jit(s2s.grad(f))):
        got = backend(lambda W: loss(W, x))(W)
        np.testing.assert_allclose(got, jax.grad(lambda W: jax_loss(W, x))(W), rtol=1e-10)


def test_the_emitted_gradient_shows_the_recomputation_under_a_comment():
    x, W = model_args(rnn)[:2]
    source = s2s.emit_python(s2s.grad(_named_block), x, W)
    comment = "# recomputed (checkpoint, policy save_only_these_names('a')): not saved by the forward pass"
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == comment)
    assert "np.tanh(a @ W)" in lines[at + 1]           # what follows it recomputes the block
    assert source.count("np.sin(") == 1                 # `a` itself is saved, not recomputed


def _blocks(lib, n_blocks, unroll):
    np_, checkpoint = lib.np, lib.checkpoint

    def block(h, W1, W2):
        return np_.tanh(np_.tanh(h @ W1) @ W2)
    block = checkpoint(block)

    def loss(h, W1, W2):
        for _ in unroll(range(n_blocks)):
            h = block(h, W1, W2)
        return h.sum()
    return loss


def _jax_residuals(loss, *args) -> list[int]:
    """Bytes of each residual jax's print_saved_residuals lists."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        jax_print_saved_residuals(loss, *args)
    sizes = []
    for line in out.getvalue().strip().splitlines():
        dims = re.match(r"f32\[([\d,]*)\]", line).group(1)
        sizes.append(4 * int(np.prod([int(d) for d in dims.split(",") if d])))
    return sizes


def _s2s_residuals(loss, *args) -> list[int]:
    with contextlib.redirect_stdout(io.StringIO()):
        return [r.nbytes for r in s2s.print_saved_residuals(loss, *args)]


MiB = 2 ** 20


@pytest.mark.parametrize("policy_name,policy,jax_policy", [(None, None, None)] + POLICIES[:4],
                         ids=["no_checkpoint"] + [p[0] for p in POLICIES[:4]])
def test_saved_residuals_of_twenty_tanh_blocks_match_jax(policy_name, policy, jax_policy):
    """Batch 2048, width 1024, float32, as shapes only (nothing runs). With a policy s2s saves
    exactly what jax saves. Without one (or saving everything) s2s saves one array less:
    its tanh derivative is t * (1 - y*y), which needs only 1 - y*y of the last block's
    output, where jax's t * (1 + y) * (1 - y) keeps y too."""
    shapes = [(2048, 1024), (1024, 1024), (1024, 1024)]
    ours = _s2s_residuals(_blocks(Library("s2s", policy), 20, s2s.unroll),
                          *[s2s.ShapeDtype(s, "float32") for s in shapes])
    theirs = _jax_residuals(_blocks(Library("jax", jax_policy), 20, lambda steps: steps),
                            *[jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes])
    if policy_name in (None, "everything_saveable"):
        assert (len(ours), sum(ours)) == (len(theirs) - 1, sum(theirs) - 8 * MiB) == (82, 648 * MiB)
    else:
        assert (len(ours), sum(ours)) == (len(theirs), sum(theirs))
    if policy_name == "nothing_saveable":       # each block's input, and the two weights
        assert (len(ours), sum(ours)) == (22, 168 * MiB)


@pytest.mark.parametrize("policy_name,policy,jax_policy", POLICIES[1:3], ids=[p[0] for p in POLICIES[1:3]])
def test_a_scan_with_a_checkpointed_step_saves_what_jax_saves(policy_name, policy, jax_policy):
    args = model_args(rnn)
    ours = _s2s_residuals(rnn(Library("s2s", policy)), *args)
    assert sorted(ours) == sorted(_jax_residuals(rnn(Library("jax", jax_policy)), *args))
    if policy_name == "nothing_saveable":       # of the steps, only the carry is stacked
        assert ours.count(5 * 2 * 6 * 4) == 1


# ---------------------------------------------------------------------------------------
# XLA keeps the saving


def _temp_bytes(loss, args) -> int:
    return s2s.jit(s2s.grad(loss, (0, 1, 2))).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_checkpointed_jit_grad_of_a_deep_tanh_mlp_needs_far_less_temporary_memory():
    rng = np.random.default_rng(0)
    args = (_floats(rng, 256, 128), _floats(rng, 128, 128, scale=0.1), _floats(rng, 128, 128, scale=0.1))
    plain = _blocks(Library("s2s"), 20, s2s.unroll)
    checked = _blocks(Library("s2s", cp.nothing_saveable), 20, s2s.unroll)
    with_remat = _temp_bytes(checked, args)
    assert with_remat < 0.6 * _temp_bytes(plain, args)
    # The barrier keeps it so: the same module compiled with XLA's cse_barrier_expander
    # left on (the CPU default) loses the saving.
    text = s2s.jit(s2s.grad(checked, (0, 1, 2))).lower(*args).as_text()
    assert "stablehlo.optimization_barrier" in text
    devices, default_options = placement(xla.devices()[0])
    expander_on = xla.client().compile_and_load(text, devices, default_options)
    assert expander_on.get_compiled_memory_stats().temp_size_in_bytes > 1.5 * with_remat
    _close(s2s.jit(s2s.grad(checked, (0, 1, 2)))(*args), s2s.jit(s2s.grad(plain, (0, 1, 2)))(*args))


# ---------------------------------------------------------------------------------------
# Errors


def test_a_policy_that_is_not_callable_is_refused():
    with pytest.raises(s2s.StagingError, match="policy must be callable"):
        s2s.checkpoint(_inner, policy="dots")
    with pytest.raises(s2s.StagingError, match="policy must be callable"):
        cp.save_from_both_policies(cp.dots_saveable, 3)


def test_static_argnums_out_of_range_is_refused():
    def loss(x, W):
        return s2s.checkpoint(_inner, static_argnums=(2,))(x, W).sum()
    x, W = model_args(rnn)[:2]
    with pytest.raises(s2s.StagingError, match="static_argnums 2 is out of range for 2 positional arguments"):
        s2s.grad(loss)(x, W)


def test_checkpoint_name_needs_a_string():
    def loss(x):
        return s2s.checkpoint_name(x, 3).sum()
    with pytest.raises(s2s.StagingError, match="checkpoint_name needs a string name"):
        s2s.grad(loss)(np.ones(3, np.float32))


def test_python_ints_and_bools_are_static_as_grad_takes_them():
    """`checkpoint(poly)(w, x, 3)`: the degree is a Python int, read by `range`, as it is
    under grad, jit and vmap (it was staged, and `range` of it a ConcretizationError)."""
    def poly(w, x, degree, odd_only):
        return sum(w[k] * x ** k for k in range(degree + 1) if not odd_only or k % 2)

    def loss(w, x):
        return np.sum(s2s.checkpoint(poly)(w, x, 3, False))
    w, x = np.array([0.5, -1.0, 2.0, 0.25]), np.linspace(-1.0, 1.0, 5)
    expected = np.stack([np.sum(x ** k) for k in range(4)])
    np.testing.assert_allclose(s2s.grad(loss)(w, x), expected)
    np.testing.assert_allclose(np.asarray(s2s.jit(s2s.grad(loss))(w, x)), expected)


def test_the_policies_have_jaxs_names_and_aliases():
    import jax
    policies = s2s.checkpoint_policies
    for name in ("everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
                 "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims",
                 "save_only_these_names", "save_anything_except_these_names", "save_any_names_but_these",
                 "save_from_both_policies"):
        assert hasattr(jax.checkpoint_policies, name) and hasattr(policies, name), name
    assert policies.checkpoint_dots is policies.dots_saveable
    assert policies.checkpoint_dots_with_no_batch_dims is policies.dots_with_no_batch_dims_saveable


def _two_named_values(lib):
    """Two tagged values ("a", "b") among untagged dots and tanh."""
    np_, name = lib.np, lib.name

    def block(x, W):
        h = name(np_.tanh(x @ W), "a")
        g = name(np_.sin(h @ W), "b")
        return np_.tanh(g @ W) @ W

    def loss(x, W):
        return lib.checkpoint(block)(x, W).sum()
    return loss


@pytest.mark.parametrize("make_policy", [
    lambda policies: policies.save_any_names_but_these("b"),
    lambda policies: policies.save_only_these_names("b"),
    lambda policies: policies.checkpoint_dots_with_no_batch_dims,
    lambda policies: policies.save_from_both_policies(policies.nothing_saveable, policies.save_only_these_names("a")),
], ids=["save_any_names_but_these", "save_only_these_names", "checkpoint_dots_with_no_batch_dims",
        "save_from_both_policies"])
def test_the_name_policies_save_what_jaxs_save(make_policy):
    """save_any_names_but_these("b") saves the tagged values other than "b" and nothing
    untagged (it is not save_anything_except_these_names, which saves every untagged value
    too): here "a" alone, besides the inputs."""
    shapes = [(64, 32), (32, 32)]
    ours = _s2s_residuals(_two_named_values(Library("s2s", make_policy(cp))),
                          *[s2s.ShapeDtype(s, "float32") for s in shapes])
    theirs = _jax_residuals(_two_named_values(Library("jax", make_policy(jcp))),
                            *[jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes])
    assert sorted(ours) == sorted(theirs)
    args = model_args(rnn)[:2]
    _close(s2s.grad(_two_named_values(Library("s2s", make_policy(cp))), (0, 1))(*args),
           jax.grad(_two_named_values(Library("jax", make_policy(jcp))), (0, 1))(*args))
