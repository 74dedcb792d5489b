"""Pytrees: nested containers of arrays that every s2s API takes and returns.

Containers are tuple, list, dict (keys in sorted order, as JAX does, so the flattened
order never depends on insertion order), OrderedDict (in its own order, as JAX keeps it),
defaultdict (sorted, its default factory kept), None (no leaves), namedtuples,
dataclasses, and any class registered with `register_pytree_node` (or decorated with
`register_pytree_node_class`). Everything else is a leaf.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from s2s.errors import StagingError


class _NodeKind(NamedTuple):
    name: str
    flatten: Callable[[Any], tuple[list, Any]]        # value -> (children, aux data)
    unflatten: Callable[[Any, list], Any]             # (aux data, children) -> value


_registry: dict[type, _NodeKind] = {}


def register_pytree_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable) -> None:
    """Registers a container class.

    `flatten_fn(value) -> (children, aux_data)`; `unflatten_fn(aux_data, children) -> value`.
    `aux_data` must be hashable and comparable: it is part of cache keys.
    """
    _registry[cls] = _NodeKind(cls.__qualname__, lambda v: tuple(flatten_fn(v)),
                               lambda aux, ch: unflatten_fn(aux, list(ch)))


def register_pytree_node_class(cls: type) -> type:
    """Registers `cls` as a container through its own methods, as JAX's decorator of the
    same name does: `tree_flatten(self) -> (children, aux_data)` and the classmethod
    `tree_unflatten(aux_data, children)`. Returns `cls`, so it decorates the class:

        @s2s.register_pytree_node_class
        class Params:
            def __init__(self, W, b): self.W, self.b = W, b
            def tree_flatten(self): return (self.W, self.b), None
            @classmethod
            def tree_unflatten(cls, aux, children): return cls(*children)
    """
    register_pytree_node(cls, lambda value: value.tree_flatten(),
                         lambda aux, children: cls.tree_unflatten(aux, children))
    return cls


def _sorted_keys(d: dict) -> list:
    try:
        return sorted(d)
    except TypeError:  # keys of mixed, unorderable types: fall back to a stable order
        return sorted(d, key=repr)


register_pytree_node(tuple, lambda t: (list(t), None), lambda _, ch: tuple(ch))
register_pytree_node(list, lambda l: (list(l), None), lambda _, ch: list(ch))
register_pytree_node(type(None), lambda _: ([], None), lambda _a, _c: None)
register_pytree_node(
    dict,
    lambda d: ([d[k] for k in _sorted_keys(d)], tuple(_sorted_keys(d))),
    lambda keys, ch: dict(zip(keys, ch)),
)

register_pytree_node(
    collections.OrderedDict,
    lambda d: (list(d.values()), tuple(d)),
    lambda keys, ch: collections.OrderedDict(zip(keys, ch)),
)
register_pytree_node(
    collections.defaultdict,
    lambda d: ([d[k] for k in _sorted_keys(d)], (d.default_factory, tuple(_sorted_keys(d)))),
    lambda aux, ch: collections.defaultdict(aux[0], zip(aux[1], ch)),
)


def _dict_keys(node: "PyTreeDef") -> tuple:
    """The keys of a dict node's children, in their order."""
    return node.aux[1] if node.node_type is collections.defaultdict else node.aux


def _node_kind(value) -> _NodeKind | None:
    cls = type(value)
    kind = _registry.get(cls)
    if kind is not None:
        return kind
    if isinstance(value, tuple) and hasattr(cls, "_fields"):  # namedtuple
        return _NodeKind(cls.__qualname__, lambda v: (list(v), None),
                         lambda _, ch, cls=cls: cls(*ch))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = tuple(f.name for f in dataclasses.fields(value))
        return _NodeKind(cls.__qualname__, lambda v: ([getattr(v, n) for n in names], names),
                         lambda _, ch, cls=cls, names=names: cls(**dict(zip(names, ch))))
    return None


def node_children(value) -> tuple[str, list, object] | None:
    """(the class name, the children, the aux data) of a container `value` (a registered
    class, a namedtuple, a dataclass, or one of the built-in containers), or None for a
    leaf. A dataclass's aux data is its field names."""
    kind = _node_kind(value)
    if kind is None:
        return None
    children, aux = kind.flatten(value)
    return kind.name, list(children), aux


class PyTreeDef:
    """The shape of a pytree without its leaves. Hashable, so it can key caches."""

    __slots__ = ("node_type", "aux", "children", "num_leaves", "_hash")

    def __init__(self, node_type, aux, children: tuple[PyTreeDef, ...]):
        self.node_type = node_type          # the container class, or None for a leaf
        self.aux = aux
        self.children = children
        self.num_leaves = 1 if node_type is None else sum(c.num_leaves for c in children)
        self._hash = hash((node_type, _hashable(aux), children))

    @property
    def is_leaf(self) -> bool:
        return self.node_type is None

    def __eq__(self, other):
        return (isinstance(other, PyTreeDef) and self.node_type is other.node_type
                and self.aux == other.aux and self.children == other.children)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({self._describe()})"

    def _describe(self) -> str:
        if self.is_leaf:
            return "*"
        inner = ", ".join(c._describe() for c in self.children)
        if self.node_type is tuple:
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.node_type is list:
            return f"[{inner}]"
        if self.node_type in (dict, collections.OrderedDict, collections.defaultdict):
            items = "{" + ", ".join(f"{k!r}: {c._describe()}" for k, c in zip(_dict_keys(self), self.children)) + "}"
            return items if self.node_type is dict else f"{self.node_type.__qualname__}({items})"
        if self.node_type is type(None):
            return "None"
        return f"{self.node_type.__qualname__}({inner})"

    def unflatten(self, leaves):
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"tree {self} expects {self.num_leaves} leaves, got {len(leaves)}")
        it = iter(leaves)
        return self._build(it)

    def _build(self, it):
        if self.is_leaf:
            return next(it)
        children = [c._build(it) for c in self.children]
        return _node_kind_for_type(self.node_type, self.aux).unflatten(self.aux, children)


def _node_kind_for_type(node_type, aux) -> _NodeKind:
    kind = _registry.get(node_type)
    if kind is not None:
        return kind
    if hasattr(node_type, "_fields"):
        return _NodeKind(node_type.__qualname__, None, lambda _, ch: node_type(*ch))
    return _NodeKind(node_type.__qualname__, None,
                     lambda names, ch: node_type(**dict(zip(names, ch))))


def _hashable(aux):
    try:
        hash(aux)
        return aux
    except TypeError:
        return repr(aux)


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, PyTreeDef]:
    """The leaves of `tree` in order (dicts by sorted key, as jax.tree_util) and its
    structure; `is_leaf(node)` true stops the descent there."""
    leaves: list = []
    try:
        return leaves, _flatten_into(tree, leaves, is_leaf)
    except RecursionError:   # caught here, not counted per node: flattening is on every call's path
        raise nested_too_deeply() from None


def nested_too_deeply() -> StagingError:
    """The error for a pytree deeper than Python's recursion limit, wherever it is flattened
    (here, or by jaxlib's dispatcher in front of a jitted function)."""
    return StagingError("a pytree is nested too deeply to flatten (deeper than Python's recursion "
                        "limit); is a container inside itself?",
                        "keep containers a few levels deep: stack the leaves into one array, or "
                        "keep them in one flat list or dict")


def _flatten_into(value, leaves: list, is_leaf) -> PyTreeDef:
    """Appends `value`'s leaves to `leaves`. A module-level function, not a closure: a
    recursive closure is a reference cycle that would keep the leaves (say, a jitted call's
    device results) alive until the garbage collector runs."""
    cls = type(value)
    if is_leaf is None:   # the common nodes first: every jitted call flattens its arguments
        if cls is tuple or cls is list:
            return PyTreeDef(cls, None, tuple([_flatten_into(c, leaves, None) for c in value]))
        if cls in _ARRAY_TYPES:
            leaves.append(value)
            return _LEAF
    kind = None if (is_leaf is not None and is_leaf(value)) else _node_kind(value)
    if kind is None:
        leaves.append(value)
        return PyTreeDef(None, None, ())
    children, aux = kind.flatten(value)
    return PyTreeDef(type(value), aux, tuple(_flatten_into(c, leaves, is_leaf) for c in children))


_LEAF = PyTreeDef(None, None, ())
_ARRAY_TYPES: set = {np.ndarray}   # leaf types recognised before any registry lookup


def register_array_type(cls: type) -> None:
    """Marks `cls` (exactly, not subclasses) as an array type: always a leaf, and
    recognised first when flattening (s2s.Array, passed to every jitted call)."""
    _ARRAY_TYPES.add(cls)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """The tree of structure `treedef` holding `leaves` (the inverse of tree_flatten)."""
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of `tree`, in tree_flatten's order."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None) -> PyTreeDef:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """`tree` with each leaf replaced by `fn(leaf, *the leaves at the same place in rest)`;
    the trees in `rest` have `tree`'s structure (a ValueError otherwise)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [_flatten_like(treedef, r) for r in rest]
    return treedef.unflatten(fn(*xs) for xs in zip(leaves, *others))


def _flatten_like(treedef: PyTreeDef, other) -> list:
    leaves, other_def = tree_flatten(other)
    if other_def != treedef:
        raise ValueError(f"tree structures differ: {treedef} vs {other_def}")
    return leaves


def prefix_leaf_counts(prefix: PyTreeDef, tree: PyTreeDef) -> list[int]:
    """For each leaf of `prefix`, a tree prefix of `tree`, how many leaves of `tree` lie
    under it (how vmap's `in_axes=(0, {'W': None, 'b': 0})` is matched with the arguments:
    each axis applies to a whole subtree). Read off the two structures, never the values.
    ValueError when `tree` does not have `prefix`'s containers."""
    out: list[int] = []

    def walk(node: PyTreeDef, sub: PyTreeDef):
        if node.is_leaf:
            out.append(sub.num_leaves)
            return
        if (sub.node_type is not node.node_type or len(sub.children) != len(node.children)
                or sub.aux != node.aux):
            raise ValueError(f"expected {node._describe()}, got {sub._describe()}")
        for child_node, child in zip(node.children, sub.children):
            walk(child_node, child)

    walk(prefix, tree)
    return out


def leaf_paths(treedef: PyTreeDef) -> list[tuple]:
    """For each leaf, the path of (container type, key) steps that reaches it.

    Keys are dict keys, sequence indices, or attribute names for namedtuples and
    dataclasses; the Python emitter turns them into `params['W1']` or `state.h`.
    """
    paths: list[tuple] = []

    def walk(node: PyTreeDef, prefix: tuple):
        if node.is_leaf:
            paths.append(prefix)
            return
        if node.node_type in (dict, collections.OrderedDict, collections.defaultdict):
            keys = _dict_keys(node)
        elif hasattr(node.node_type, "_fields"):
            keys = node.node_type._fields
        elif dataclasses.is_dataclass(node.node_type):
            keys = node.aux
        else:
            keys = range(len(node.children))
        for key, child in zip(keys, node.children):
            walk(child, prefix + ((node.node_type, key),))

    walk(treedef, ())
    return paths
