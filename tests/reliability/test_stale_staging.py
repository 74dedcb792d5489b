"""Staging never serves a stale result: every Python value a staging read besides its
arguments (globals, closure cells, defaults, attributes, helpers) is guarded, and a cached
staging whose guards fail is staged again (issue 12)."""
import gc
import sys
import warnings
import weakref

import numpy as np
import pytest

import s2s
from s2s.frontend import guards, source, stage

SCALE = 1.0
SMALL = np.ones(3, np.float32)
LARGE = np.ones(guards.SMALL_ARRAY_BYTES // 4 + 1, np.float32)
stagings = []


def scaled_sum(x):
    stagings.append("scaled_sum")
    return np.sum(x * SCALE)


def times_small(x):
    return np.sum(x * SMALL)


def plus_large_head(x):
    return np.sum(x) + LARGE[0]


def helper(x):
    return x * 2.0


def through_helper(x):
    return np.sum(helper(x))


def helper_reading_scale(x):
    return x * SCALE


def through_helper_reading_scale(x):
    return np.sum(helper_reading_scale(x))


def only_numpy(x):
    return np.sum(np.sin(x))


X = np.ones(3, np.float32)


def value_of(result) -> float:
    """A scalar result (an Array, a NumPy value, or a (value, gradient) pair's value)."""
    return float(np.asarray(result))


# Each entry point, called on `fn` at X; its result reduced to one number.
ENTRY_POINTS = {
    "grad": lambda fn: float(np.sum(s2s.grad(fn)(X))),
    "value_and_grad": lambda fn: float(np.sum(s2s.value_and_grad(fn)(X)[1])),
    "jvp": lambda fn: value_of(s2s.jvp(fn, (X,), (X,))[1]),
    "jit": lambda fn: value_of(s2s.jit(fn)(X)),
    "jit_python": lambda fn: value_of(s2s.jit(fn, backend="python")(X)),
}


@pytest.fixture
def scale(monkeypatch):
    """Sets this module's SCALE for one test (restored after)."""
    def set_scale(value):
        monkeypatch.setattr(sys.modules[__name__], "SCALE", value)
    return set_scale


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("fn", [scaled_sum, through_helper_reading_scale], ids=["read", "read_by_a_helper"])
def test_a_module_level_float_changed_is_seen(entry, fn, scale):
    """Read by the function, or by a helper it calls (the helper's guards count too)."""
    run = ENTRY_POINTS[entry]
    scale(1.0)
    assert run(fn) == 3.0
    scale(3.0)
    assert run(fn) == 9.0


def with_default(x, factor=2.0):
    return np.sum(x * factor)


def rebind_helper(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "helper", lambda x: x * 3.0)


# function, its value at X before the change, the change, its value after.
PRIMED_CASES = {
    "global": (scaled_sum, 3.0, lambda monkeypatch: monkeypatch.setattr(
        sys.modules[__name__], "SCALE", 2.0), 6.0),
    "helper": (through_helper, 6.0, rebind_helper, 9.0),
    "defaults": (with_default, 6.0, lambda monkeypatch: monkeypatch.setattr(
        with_default, "__defaults__", (5.0,)), 15.0),
}


@pytest.mark.parametrize("backend", ["xla", "python"])
@pytest.mark.parametrize("case", sorted(PRIMED_CASES))
def test_a_primed_jit_sees_the_change(backend, case, monkeypatch):
    """Called often enough for every fast path to be taken (the Python backend's, and
    jaxlib's C++ dispatcher for XLA), then what the function read changes."""
    fn, before, change, after = PRIMED_CASES[case]
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 1.0)
    jitted = s2s.jit(fn, backend=backend)
    for _ in range(5):
        assert value_of(jitted(X)) == before
    change(monkeypatch)
    for _ in range(3):
        assert value_of(jitted(X)) == after


def test_emit_python_reads_the_current_global(scale):
    scale(1.0)
    assert "1.0" in s2s.emit_python(scaled_sum, X)
    scale(5.0)
    assert "5.0" in s2s.emit_python(scaled_sum, X)


def make_closures():
    factors = [1.0]
    offset = 0.0

    def with_list(x):
        return np.sum(x * factors[0])

    def with_cell(x):
        return np.sum(x) + offset

    def set_offset(value):
        nonlocal offset
        offset = value
    return with_list, factors, with_cell, set_offset


@pytest.mark.parametrize("entry", ["jit", "jit_python", "jvp"])
def test_a_closure_list_changed_in_place_and_a_rebound_cell_are_seen(entry):
    run = ENTRY_POINTS[entry]
    with_list, factors, with_cell, set_offset = make_closures()
    assert run(with_list) == 3.0
    factors[0] = 4.0
    assert run(with_list) == 12.0
    assert value_of(s2s.jit(with_cell)(X)) == 3.0
    set_offset(1.5)
    assert value_of(s2s.jit(with_cell)(X)) == 4.5


def test_replaced_defaults_are_seen(monkeypatch):
    jitted = s2s.jit(with_default)
    assert value_of(jitted(X)) == 6.0
    monkeypatch.setattr(with_default, "__defaults__", (5.0,))
    assert value_of(jitted(X)) == 15.0
    assert float(np.sum(s2s.grad(with_default)(X))) == 15.0


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return np.sum(x * self.factor)

    def loss(self, x):
        return np.sum(x * self.factor)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_an_attribute_of_a_callable_object_changed_is_seen(entry):
    run = ENTRY_POINTS[entry]
    scaler = Scaler(1.0)
    run(scaler)   # primes the cache (and the jit's fast paths) on this object
    scaler.factor = 7.0
    assert run(scaler) == 21.0
    assert run(scaler.loss) == 21.0
    scaler.factor = 2.0
    assert run(scaler.loss) == 6.0


def test_a_small_global_array_changed_in_place_is_restaged():
    jitted = s2s.jit(times_small)
    try:
        assert value_of(jitted(X)) == 3.0
        SMALL[0] = 10.0
        assert value_of(jitted(X)) == 12.0
        assert float(np.sum(s2s.grad(times_small)(X))) == 12.0
    finally:
        SMALL[0] = 1.0


def test_a_large_global_array_is_captured_by_identity_with_a_warning():
    with pytest.warns(UserWarning, match=r"reads the global 'LARGE', an array of shape .* captured "
                                         r"by identity") as shown:
        staged = stage(plus_large_head, (X,))
    # shown at the user's function, never at s2s's own lines
    assert shown[0].filename == __file__
    assert shown[0].lineno == plus_large_head.__code__.co_firstlineno
    assert not staged.guards.stable
    # Rebinding the name is still seen: the guard is on identity.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = sys.modules[__name__].LARGE
        try:
            sys.modules[__name__].LARGE = np.full_like(old, 2.0)
            assert value_of(s2s.jit(plus_large_head)(X)) == 5.0
        finally:
            sys.modules[__name__].LARGE = old


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_rebound_helper_is_seen(entry, monkeypatch):
    run = ENTRY_POINTS[entry]
    assert run(through_helper) == 6.0
    rebind_helper(monkeypatch)
    assert run(through_helper) == 9.0


def test_an_unchanged_function_is_not_staged_again(scale):
    scale(1.0)
    stagings.clear()
    jitted = s2s.jit(scaled_sum)
    for _ in range(5):
        jitted(X)
        s2s.grad(scaled_sum)(X)
    scale(1.0)   # a new float object with the same value: the guard compares values
    jitted(X)
    assert stagings == ["scaled_sum"]
    scale(2.0)
    jitted(X)
    assert stagings == ["scaled_sum", "scaled_sum"]


def test_guards_on_modules_and_builtins_alone_are_not_checked_before_dispatched_calls():
    """jaxlib's C++ dispatcher checks no guards: `s2s.jit` checks those of the stagings it
    handed it before each call, except guards on imported modules and unshadowed builtins
    (`stable`), so a function reading only `np` and its arguments pays nothing."""
    assert stage(only_numpy, (X,)).guards.stable
    assert not stage(scaled_sum, (X,)).guards.stable
    assert not stage(through_helper, (X,)).guards.stable


class SlottedScaler:
    """A callable object that cannot be weakly referenced (no `__weakref__` slot)."""
    __slots__ = ("factor",)
    freed = []

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, x):
        return np.sum(x * self.factor)

    def __del__(self):
        SlottedScaler.freed.append(self.factor)


@pytest.mark.parametrize("entry", ["jit", "grad"])
def test_dropping_a_slotted_callable_frees_it_and_its_stagings(entry):
    run = ENTRY_POINTS[entry]
    SlottedScaler.freed.clear()
    stagings_left = []
    for factor in range(1, 41):
        scaler = SlottedScaler(float(factor))
        assert run(scaler) == 3.0 * factor
        stagings_left.append(weakref.ref(stage(scaler, (X,))))
        del scaler
    gc.collect()
    assert len(SlottedScaler.freed) == 40
    # One staging per kind of arguments is kept for the class (each instance's replaced the last).
    assert sum(ref() is not None for ref in stagings_left) <= 1


def test_slotted_callables_with_different_attributes_each_get_their_own_result():
    a, b = SlottedScaler(1.0), SlottedScaler(5.0)
    jitted_a, jitted_b = s2s.jit(a), s2s.jit(b)
    for _ in range(3):
        assert value_of(jitted_a(X)) == 3.0
        assert value_of(jitted_b(X)) == 15.0
        assert float(np.sum(s2s.grad(a)(X))) == 3.0
        assert float(np.sum(s2s.grad(b)(X))) == 15.0
    b.factor = 2.0
    assert value_of(jitted_b(X)) == 6.0


MODULE_SOURCE = """
import numpy as np

SCALE = 2.0


def scaled_sum(x):
    return np.sum(x * SCALE)
"""


def _load_module(directory, name: str):
    """A module read from a file and kept by nothing but the caller (not in sys.modules),
    as a plugin loader or a test runner holds one."""
    import importlib.util
    path = directory / f"{name}.py"
    path.write_text(MODULE_SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_dropped_module_is_freed_with_its_stagings(entry, tmp_path):
    """The guard on a global read the module's globals, which hold the function that the
    staging cache is weakly keyed by: holding them kept every function of a dropped module
    (and all that was staged and compiled for it) alive for good, and the parse of every
    file read stayed cached (a notebook's cells, modules generated and loaded)."""
    module = _load_module(tmp_path, f"dropped_module_{entry}")
    assert ENTRY_POINTS[entry](module.scaled_sum) == pytest.approx(6.0)
    module.SCALE = 3.0   # still guarded: the change is seen
    assert ENTRY_POINTS[entry](module.scaled_sum) == pytest.approx(9.0)
    function, staging = weakref.ref(module.scaled_sum), weakref.ref(stage(module.scaled_sum, (X,)))
    filename = module.__file__
    assert filename in source._parsed_files
    del module
    gc.collect()   # (one collection: the module's globals and functions are a cycle, and
    assert function() is None and staging() is None   # the staging must be in no other)
    assert filename not in source._parsed_files   # nor its file's parse
