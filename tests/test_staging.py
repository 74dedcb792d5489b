"""s2s.staging: the collector pause around big stagings and what it leaves behind."""
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s
from s2s import staging
from s2s.core import check_jaxpr
from s2s.transformed import staged_or_error


class Node:
    """An object that can be part of a reference cycle (and be weakly referenced)."""


def _cycle_made_while_paused():
    """A weak reference to an object in a garbage cycle made inside `paused_gc`."""
    with staging.paused_gc():
        node = Node()
        node.self = node
        ref = weakref.ref(node)
        del node
    return ref


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pause_moves_what_it_made_to_the_oldest_generation(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    ref = _cycle_made_while_paused()
    assert gc.get_count()[0] < 100   # the young generation is (nearly) empty again
    assert ref() is not None and gc.isenabled()
    gc.collect(1)                    # a young pass does not see it: it is in the oldest
    assert ref() is not None
    gc.collect()                     # a full collection frees the cycle
    assert ref() is None


def test_s2s_runs_a_full_collection_once_it_has_moved_its_budget(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    monkeypatch.setattr(staging, "PROMOTION_BUDGET", 1000)
    gc.collect()
    first = _cycle_made_while_paused()
    assert first() is not None
    with staging.paused_gc():
        made = [Node() for _ in range(2000)]   # more than the budget
    assert first() is None and staging._promoted == 0
    del made


def test_a_full_collection_by_the_program_restarts_the_budget(collector_enabled, monkeypatch):
    """What s2s moved before a program's own `gc.collect()` was traversed by it: s2s does
    not collect again for those objects (a cost that grows with all the program holds)."""
    monkeypatch.setattr(staging, "PROMOTION_BUDGET", 1000)
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    with staging.paused_gc():
        kept = [Node() for _ in range(900)]
    assert 900 <= staging._promoted <= 1000
    gc.collect()
    full_collections = gc.get_stats()[2]["collections"]
    with staging.paused_gc():
        more = [Node() for _ in range(900)]   # over the budget counted from before gc.collect()
    assert gc.get_stats()[2]["collections"] == full_collections   # s2s ran none
    assert 900 <= staging._promoted <= 1000
    del kept, more


def test_a_program_that_freezes_objects_keeps_its_generations(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    frozen = Node()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        _cycle_made_while_paused()
        assert gc.get_freeze_count() == count   # nothing of ours frozen, nothing of its thawed
        assert staging._promoted == 0
    finally:
        gc.unfreeze()
    del frozen


def test_nested_pauses_promote_once_on_the_way_out(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    with staging.paused_gc():
        with staging.paused_gc():
            kept = [Node() for _ in range(500)]
        assert not gc.isenabled() and staging._promoted == 0   # the inner one leaves it paused
    assert gc.isenabled() and staging._promoted >= 500
    del kept


def test_the_callers_garbage_is_collected_before_a_pause_not_moved(collector_enabled, monkeypatch):
    """Review: the move takes the young generations whole, so a cycle the caller dropped
    just before staging (an 80 MB one, say) would have waited for a full collection."""
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    node = Node()
    node.self = node
    dropped = weakref.ref(node)
    del node
    with staging.paused_gc():
        pass
    assert dropped() is None


# ---------------------------------------------------------------------------------------
# Inlining into a builder that shares what it inlines (`JaxprBuilder.shares_inlined`)


def _tanh_chain(x):
    y = np.tanh(x) * 1.5
    return np.sum(np.tanh(y) + x)


def test_a_transform_staged_by_itself_lends_the_derivative_its_equations():
    x = np.linspace(-1.0, 1.0, 4)
    direct = s2s.make_jaxpr(s2s.grad(_tanh_chain))(x)
    derived = next(a for k, a in staged_or_error(_tanh_chain, (x,), {}).artifacts.items()
                   if k[0] == "derived").closed
    check_jaxpr(direct)
    shared = {id(e) for e in derived.jaxpr.eqns} & {id(e) for e in direct.jaxpr.eqns}
    # All but the equations that read the input, which are copied onto the staging's own.
    reading_input = [e for e in derived.jaxpr.eqns if derived.jaxpr.invars[0] in e.invars]
    assert reading_input and len(shared) == len(derived.jaxpr.eqns) - len(reading_input)
    assert direct.jaxpr.invars[0] is not derived.jaxpr.invars[0]
    np.testing.assert_allclose(s2s.eval_jaxpr(direct, x)[0], jax.grad(_tanh_chain_jnp)(x), rtol=1e-12)


def _tanh_chain_jnp(x):
    y = jnp.tanh(x) * 1.5
    return jnp.sum(jnp.tanh(y) + x)


def test_a_derivative_lent_to_a_staging_keeps_its_names_when_user_code_names_a_copy():
    x = np.linspace(-1.0, 1.0, 4)
    first = s2s.emit_python(s2s.value_and_grad(_tanh_chain), x)

    def named(x):
        value, g = s2s.value_and_grad(_tanh_chain)(x)   # names the value, nameless in the derivative
        return value * 2.0, g
    assert "value = " in s2s.emit_python(named, x)
    assert s2s.emit_python(s2s.value_and_grad(_tanh_chain), x) == first
    assert "value = " not in first


def test_a_jaxpr_inlined_twice_into_a_sharing_builder_is_copied_the_second_time():
    x = np.linspace(-1.0, 1.0, 4)
    closed = s2s.make_jaxpr(_tanh_chain)(x)
    inner = closed.jaxpr.eqns
    with staging.JaxprBuilder() as builder:
        builder.shares_inlined = True
        arg = builder.new_arg(closed.in_avals[0], "x")
        (once,) = staging.inline_jaxpr(closed, [arg])
        (twice,) = staging.inline_jaxpr(closed, [arg])
        twice = twice + once
        both = builder.build([twice])
    check_jaxpr(both)   # every variable defined once
    reading_input = [e for e in inner if closed.jaxpr.invars[0] in e.invars]
    assert sum(e in inner for e in both.jaxpr.eqns) == len(inner) - len(reading_input)   # shared once
    np.testing.assert_allclose(s2s.eval_jaxpr(both, x)[0], 2 * _tanh_chain(x), rtol=1e-12)


def test_a_lent_jaxpr_joins_a_builder_with_equations_as_they_are_but_its_inputs_replaced():
    x = np.linspace(-1.0, 1.0, 4)
    closed = s2s.make_jaxpr(_tanh_chain)(x)
    inner = closed.jaxpr.eqns
    with staging.JaxprBuilder() as builder:   # (a builder that does not share what it inlines)
        arg = builder.new_arg(closed.in_avals[0], "x")
        scaled = arg * 2.0   # the builder has equations of its own, which are not searched
        (out,) = staging.inline_jaxpr(closed, [scaled], lent=True)
        lent = builder.build([out])
    check_jaxpr(lent)
    reading_input = [e for e in inner if closed.jaxpr.invars[0] in e.invars]
    assert reading_input and sum(e in inner for e in lent.jaxpr.eqns) == len(inner) - len(reading_input)
    assert not any(closed.jaxpr.invars[0] in e.invars for e in lent.jaxpr.eqns)   # read as `scaled`
    np.testing.assert_allclose(s2s.eval_jaxpr(lent, x)[0], _tanh_chain(2.0 * x), rtol=1e-12)


def test_a_builder_finds_the_equation_of_every_value_it_staged_also_after_dropping_some():
    aval = s2s.core.ShapedArray((3,), np.float32)
    tanh, exp, sin = (staging.PRIMITIVES[name] for name in ("tanh", "exp", "sin"))
    with staging.JaxprBuilder() as builder:
        x = builder.new_arg(aval, "x")
        first = tanh.bind(x)
        assert builder.producer(first.variable).primitive.name == "tanh"
        assert builder.producer(x.variable) is None
        mark = len(builder.eqns)
        dropped = exp.bind(first)
        assert builder.producer(dropped.variable).primitive.name == "exp"   # indexed up to here
        builder.drop_equations_from(mark)   # (a loop given up)
        kept = sin.bind(first)   # appended where the dropped one was
        assert builder.producer(kept.variable).primitive.name == "sin"
        assert builder.producer(dropped.variable) is None
        assert builder.producer(first.variable).primitive.name == "tanh"


def test_a_while_loop_on_a_staged_test_keeps_no_equation_of_its_first_test():
    def f(x):
        i = 0.0
        while np.sum(x) > i:   # staged: its test is evaluated by the loop, not before it
            i = i + 1.0
            x = x * 0.5
        return x
    x = np.array([3.0, 4.0])
    closed = s2s.make_jaxpr(f)(x)
    check_jaxpr(closed)
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["while_loop"]
    np.testing.assert_allclose(s2s.eval_jaxpr(closed, x)[0], f(x))
