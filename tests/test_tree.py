"""Pytrees: flatten/unflatten round trips for every container kind."""
import collections
import dataclasses
import weakref

import numpy as np
import pytest

import s2s
from s2s.tree import leaf_paths, tree_flatten, tree_map, tree_structure, tree_unflatten

Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass
class State:
    h: object
    c: object


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


s2s.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, ch: Pair(*ch))


@pytest.mark.parametrize("tree", [
    1.0, (1, 2), [1, (2, 3)], {"b": 1, "a": [2, 3]}, None, (None, 1), Point(1, 2),
    State(h=1, c=(2, 3)), {"p": Point(x=[1], y={"z": 2})},
])
def test_round_trip(tree):
    leaves, treedef = tree_flatten(tree)
    assert tree_unflatten(treedef, leaves) == tree


def test_dict_leaves_in_sorted_key_order():
    assert tree_flatten({"b": 2, "a": 1})[0] == [1, 2]


def test_ordered_and_default_dicts_are_containers_as_in_jax():
    """An OrderedDict keeps its own order (two orders are two structures), a defaultdict
    sorts its keys and keeps its default factory; neither is the same structure as a dict.
    jax.tree_util flattens them the same way."""
    import jax
    ordered = collections.OrderedDict([("b", 2), ("a", 1)])
    default = collections.defaultdict(list, {"b": 2, "a": 1})
    for tree, leaves, keys in ((ordered, [2, 1], "ba"), (default, [1, 2], "ab")):
        assert tree_flatten(tree)[0] == leaves == jax.tree_util.tree_leaves(tree)
        rebuilt = tree_unflatten(tree_structure(tree), [10, 20])
        assert type(rebuilt) is type(tree) and list(rebuilt.items()) == list(zip(keys, [10, 20]))
    assert tree_unflatten(tree_structure(default), [1, 2]).default_factory is list
    assert tree_structure(ordered) != tree_structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    assert tree_structure(ordered) != tree_structure({"b": 2, "a": 1}) != tree_structure(default)
    assert [[k for _, k in p] for p in leaf_paths(tree_structure(ordered))] == [["b"], ["a"]]
    assert repr(tree_structure(ordered)) == "PyTreeDef(OrderedDict({'b': *, 'a': *}))"


def test_registered_node():
    leaves, treedef = tree_flatten(Pair(1, (2, 3)))
    assert leaves == [1, 2, 3]
    rebuilt = tree_unflatten(treedef, [4, 5, 6])
    assert (rebuilt.a, rebuilt.b) == (4, (5, 6))


def test_tree_map_and_structure_equality():
    assert tree_map(lambda a, b: a + b, {"x": 1, "y": (2,)}, {"x": 10, "y": (20,)}) == {"x": 11, "y": (22,)}
    assert tree_structure((1, {"a": 2})) == tree_structure((3, {"a": 4}))
    assert tree_structure((1, 2)) != tree_structure([1, 2])
    with pytest.raises(ValueError):
        tree_map(lambda a, b: a, (1, 2), (1, 2, 3))


def test_leaf_paths():
    _, treedef = tree_flatten({"W": np.zeros(1), "layers": [Point(1, 2)]})
    assert [[k for _, k in p] for p in leaf_paths(treedef)] == [["W"], ["layers", 0, "x"], ["layers", 0, "y"]]


def test_none_has_no_leaves():
    assert tree_flatten(None)[0] == []



@pytest.fixture
def without_gc():
    """The cyclic garbage collector off: only reference counts free objects."""
    import gc
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


def test_flattening_keeps_no_leaf_alive(without_gc):
    """A recursive closure in tree_flatten was a reference cycle holding the leaves: a
    jitted call's results (megabytes of device buffers) then lived until a GC pass."""
    class Leaf:
        pass
    leaf = Leaf()
    alive = weakref.ref(leaf)
    tree_flatten({"a": [(leaf,)]})
    del leaf
    assert alive() is None


def test_a_jitted_calls_results_are_freed_with_their_last_reference(without_gc):
    result = s2s.block_until_ready(s2s.jit(lambda x: {"y": [x * 2, x + 1]})(np.ones(3)))
    alive = weakref.ref(s2s.tree_leaves(result)[0])
    del result
    assert alive() is None


def test_array_types_are_leaves_found_first():
    from s2s_runtime.array import Array
    result = s2s.jit(lambda x: x + 1)(np.ones(2))
    assert type(result) is Array
    leaves, treedef = tree_flatten([(result, np.zeros(1)), {"a": result}])
    assert leaves[0] is result and leaves[2] is result and treedef.num_leaves == 3


def test_deeply_nested_tree_is_a_clear_error():
    deep = 1.0
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(s2s.errors.StagingError, match="nested too deeply"):
        tree_flatten(deep)


def test_self_containing_list_is_a_clear_error():
    loop = []
    loop.append(loop)
    with pytest.raises(s2s.errors.StagingError, match="is a container inside itself"):
        tree_flatten(loop)


def test_prefix_leaf_counts_reads_the_structures_alone():
    tree = s2s.tree.tree_structure(({"W": np.ones(2), "b": np.ones(2)}, [1.0, 2.0, 3.0]))
    prefix = s2s.tree.tree_structure((0, None), is_leaf=lambda v: v is None)
    assert s2s.tree.prefix_leaf_counts(prefix, tree) == [2, 3]
    per_key = s2s.tree.tree_structure(({"W": 0, "b": 1}, 0))
    assert s2s.tree.prefix_leaf_counts(per_key, tree) == [1, 1, 3]
    with pytest.raises(ValueError, match="expected"):
        s2s.tree.prefix_leaf_counts(s2s.tree.tree_structure(({"W": 0}, 0)), tree)
