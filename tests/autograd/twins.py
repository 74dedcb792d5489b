"""One program, run by s2s.autograd and by autograd: the oracle of these tests.

A test's functions are written as a user switching from autograd writes them, with NumPy
and s2s.autograd's names; `autograd_twin` makes a copy of one whose names are switched
back (NumPy to autograd.numpy, SciPy's special functions to autograd.scipy's, each name of
s2s.autograd's to autograd's), as are those of the functions of its module it calls. The
copy runs on autograd's tracer, which shares no code with s2s.
"""
import importlib
import types

import numpy as np
import pytest
import scipy.special

autograd = pytest.importorskip("autograd")

# (module a program imports under s2s, the module autograd's program imports instead).
# Imported by name: `misc.flatten` the attribute is the function, the module is shadowed.
SWITCHED_MODULES = [(importlib.import_module(ours), importlib.import_module(theirs)) for ours, theirs in [
    ("numpy", "autograd.numpy"),
    ("scipy.special", "autograd.scipy.special"),
    ("s2s.autograd", "autograd"),
    ("s2s.autograd.wrap_util", "autograd.wrap_util"),
    ("s2s.autograd.test_util", "autograd.test_util"),
    ("s2s.autograd.misc", "autograd.misc"),
    ("s2s.autograd.misc.flatten", "autograd.misc.flatten"),
    ("s2s.autograd.misc.optimizers", "autograd.misc.optimizers"),
]]


def _switched(value):
    """What autograd's program has where s2s's has `value`: the other module, or the
    other module's function of the same name."""
    for ours, theirs in SWITCHED_MODULES:
        if value is ours:
            return theirs
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and getattr(ours, name, None) is value and hasattr(theirs, name):
            return getattr(theirs, name)
    return value


def autograd_twin(fn):
    """`fn` as the same source runs under autograd (see the module docstring)."""
    if not isinstance(fn, types.FunctionType):   # NumPy's own function: autograd.numpy's
        return _switched(fn)
    namespace = {}
    for name, value in fn.__globals__.items():
        namespace[name] = _switched(value) if not isinstance(value, (int, float, str)) else value
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
            namespace[name] = types.FunctionType(value.__code__, namespace, value.__name__,
                                                 value.__defaults__, value.__closure__)
    return namespace[fn.__name__] if fn.__name__ in namespace else types.FunctionType(
        fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def assert_trees_close(got, expected, rtol=1e-7, atol=1e-9, what=""):
    """Same containers (tuples stay tuples, lists lists, dict keys equal) and close leaves
    of the same shapes."""
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected), \
            f"{what}: {type(got).__name__} of {len(got)} != autograd's {type(expected).__name__} of {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_trees_close(g, e, rtol, atol, f"{what}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), f"{what}: keys {set(got)} != {set(expected)}"
        for key in expected:
            assert_trees_close(got[key], expected[key], rtol, atol, f"{what}[{key!r}]")
    else:
        assert np.shape(got) == np.shape(expected), f"{what}: shape {np.shape(got)} != autograd's {np.shape(expected)}"
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)
