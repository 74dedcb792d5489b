"""Every ordinary Python read a staging makes is guarded (issue 39): containers that are
not exactly a list or dict, reads through builtins (`getattr`, `type`, `vars`), the user's
own modules (reloaded too), objects reached through a list, an `lru_cache` helper whose
cache is cleared and NumPy subclasses changed in place. Each case reads 1.0, is called,
changes to 4.0 and is called again: every backend must see the change, as plain Python
does."""
import array
import collections
import functools
import importlib
import sys
import types

import numpy as np
import pytest

import s2s
from s2s.frontend import guards, stage

X = np.ones(3)

ENTRY_POINTS = {
    "grad": lambda fn: float(np.sum(s2s.grad(fn)(X))),
    "jit": lambda fn: float(np.asarray(s2s.jit(fn)(X))),
    "jit_python": lambda fn: float(np.asarray(s2s.jit(fn, backend="python")(X))),
}


def in_container(container, read, write):
    """A function reading a value from `container` (a closure variable), and the change."""
    return (lambda x: np.sum(x * read(container))), lambda: write(container, 4.0)


def set_item(container, value, key=0):
    container[key] = value


class ListSubclass(list):
    pass


class DictSubclass(dict):
    pass


class Ndarray(np.ndarray):
    pass


class Layer:
    def __init__(self, scale):
        self.scale = scale


class Model:
    SCALE = 1.0

    def __init__(self):
        self.scale = 1.0
        self.layers = [Layer(1.0), Layer(1.0)]
        self.blocks = {"encoder": Layer(1.0)}

    def by_getattr(self, x):
        return np.sum(x * getattr(self, "scale"))

    def by_getattr_default(self, x):
        return np.sum(x * getattr(self, "extra", 1.0))

    def by_hasattr(self, x):
        return np.sum(x * (4.0 if hasattr(self, "extra") else 1.0))

    def by_type(self, x):
        return np.sum(x * type(self).SCALE)

    def by_vars_of_class(self, x):
        return np.sum(x * vars(type(self))["SCALE"])

    def by_vars(self, x):
        return np.sum(x * vars(self)["scale"])

    def by_index(self, x):
        return np.sum(x * self.layers[1].scale)

    def by_key(self, x):
        return np.sum(x * self.blocks["encoder"].scale)

    def by_loop(self, x):
        for layer in self.layers:
            x = x * layer.scale
        return np.sum(x)


def model_case(method: str, change):
    """A method of a fresh Model subclass (its class attributes are its own) and the change."""
    cls = type("Model", (Model,), {"SCALE": 1.0})
    model = cls()
    return getattr(model, method), lambda: change(model)


def masked():
    values = np.ma.masked_array([1.0, 4.0], mask=[False, True])

    def change():
        values.mask = [True, False]
    return (lambda x: np.sum(x * values.sum())), change


def make_case(name):
    containers = {
        "OrderedDict": (collections.OrderedDict(k=1.0), lambda c: c["k"], lambda c, v: set_item(c, v, "k")),
        "defaultdict": (collections.defaultdict(float, k=1.0), lambda c: c["k"], lambda c, v: set_item(c, v, "k")),
        "ChainMap": (collections.ChainMap({}, {"k": 1.0}), lambda c: c["k"], lambda c, v: set_item(c.maps[1], v, "k")),
        "UserDict": (collections.UserDict(k=1.0), lambda c: c["k"], lambda c, v: set_item(c, v, "k")),
        "dict subclass": (DictSubclass(k=1.0), lambda c: c["k"], lambda c, v: set_item(c, v, "k")),
        "list subclass": (ListSubclass([1.0]), lambda c: c[0], set_item),
        "deque": (collections.deque([1.0]), lambda c: c[0], set_item),
        "bytearray": (bytearray([1]), lambda c: c[0], lambda c, v: set_item(c, int(v))),
        "array.array": (array.array("d", [1.0]), lambda c: c[0], set_item),
        "ndarray subclass": (np.ones(2).view(Ndarray), lambda c: c[0], set_item),
    }
    if name in containers:
        return in_container(*containers[name])
    if name == "masked array":
        return masked()
    model_cases = {
        "getattr": ("by_getattr", lambda m: setattr(m, "scale", 4.0)),
        "getattr with a default": ("by_getattr_default", lambda m: setattr(m, "extra", 4.0)),
        "hasattr": ("by_hasattr", lambda m: setattr(m, "extra", 0.0)),
        "type(self).attr": ("by_type", lambda m: setattr(type(m), "SCALE", 4.0)),
        "vars(type(self))[name]": ("by_vars_of_class", lambda m: setattr(type(m), "SCALE", 4.0)),
        "vars(self)[name]": ("by_vars", lambda m: setattr(m, "scale", 4.0)),
        "self.layers[1].attr": ("by_index", lambda m: setattr(m.layers[1], "scale", 4.0)),
        "self.blocks[key].attr": ("by_key", lambda m: setattr(m.blocks["encoder"], "scale", 4.0)),
        "for layer in self.layers": ("by_loop", lambda m: setattr(m.layers[1], "scale", 4.0)),
    }
    return model_case(*model_cases[name])


CASES = ["OrderedDict", "defaultdict", "ChainMap", "UserDict", "dict subclass", "list subclass", "deque",
         "bytearray", "array.array", "ndarray subclass", "masked array", "getattr", "getattr with a default",
         "hasattr", "type(self).attr", "vars(type(self))[name]", "vars(self)[name]", "self.layers[1].attr", "self.blocks[key].attr",
         "for layer in self.layers"]


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("case", CASES)
def test_a_changed_value_is_seen(case, entry):
    fn, change = make_case(case)
    run = ENTRY_POINTS[entry]
    for _ in range(3):   # (every fast path of the jit taken)
        assert run(fn) == 3.0
    change()
    for _ in range(2):
        assert run(fn) == 12.0


@pytest.mark.parametrize("case", CASES)
def test_an_unchanged_value_is_not_staged_again(case):
    """A guard compares what it read: the same contents read again hold (a class's
    `vars()` is a new mapping proxy on each read, a bound method a new object)."""
    fn, _ = make_case(case)
    assert stage(fn, (X,)) is stage(fn, (X,))


def write_module(directory, name: str, scale: float):
    path = directory / f"{name}.py"
    path.write_text(f"SCALE = {scale}\n")
    return path


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's (a file on sys.path, imported as usual), and how to edit it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"user_config_{len(sys.modules)}"
    write_module(tmp_path, name, 1.0)
    module = importlib.import_module(name)
    yield module, lambda scale: write_module(tmp_path, name, scale)
    sys.modules.pop(name, None)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_an_attribute_of_the_users_module_changed_or_reloaded_is_seen(entry, user_module):
    module, edit = user_module
    run = ENTRY_POINTS[entry]
    fn = lambda x: np.sum(x * module.SCALE)   # noqa: E731
    assert run(fn) == 3.0
    module.SCALE = 4.0
    assert run(fn) == 12.0
    edit(2.0)
    importlib.invalidate_caches()
    sys.modules[module.__name__].__dict__.pop("__cached__", None)
    importlib.reload(module)
    assert module.SCALE == 2.0
    assert run(fn) == 6.0


def test_an_import_from_the_users_module_in_the_function_is_guarded(user_module, tmp_path):
    module, _ = user_module
    reader = tmp_path / f"reader_of_{module.__name__}.py"
    reader.write_text(f"import numpy as np\n\ndef fn(x):\n    from {module.__name__} import SCALE\n"
                      "    return np.sum(x * SCALE)\n")
    jitted = s2s.jit(importlib.import_module(reader.stem).fn, backend="python")
    assert float(jitted(X)) == 3.0
    module.SCALE = 4.0
    assert float(jitted(X)) == 12.0


def test_library_modules_are_not_guarded_and_the_users_are(user_module):
    assert all(guards.is_library_module(m) for m in (np, np.linalg, collections, sys, functools, s2s))
    assert not guards.is_library_module(user_module[0])
    assert not guards.is_library_module(types.ModuleType("made_by_hand"))
    assert stage(lambda x: np.sum(np.sin(x)), (X,)).guards.stable


def test_a_cleared_lru_cache_is_seen(user_module):
    """Plain Python reads a cached helper's stale result until its cache is cleared; so does
    s2s."""
    module, _ = user_module

    @functools.lru_cache
    def scale():
        return module.SCALE

    fn = lambda x: np.sum(x * scale())   # noqa: E731
    for run in ENTRY_POINTS.values():
        assert run(fn) == 3.0
    module.SCALE = 4.0
    for run in ENTRY_POINTS.values():
        assert run(fn) == 3.0   # still cached, as in Python
    scale.cache_clear()
    for run in ENTRY_POINTS.values():
        assert run(fn) == 12.0
