"""Loading what `s2s compile` wrote: `load(manifest_path, name)` → a callable.

    from s2s_runtime import manifest
    grad_loss = manifest.load("build/manifest.json", "pkg.models.dense.grad_loss")
    grads = grad_loss(params, x, y)       # the exported function's own arguments and result tree
    flat = manifest.load_flat("build/manifest.json", "pkg.models.dense.grad_loss")
    [dW, db] = flat(W, b, x, y)           # the same on flat arrays (the entry's `inputs`, `outputs`)

Entries are named by their module's dotted name and the export's stem. Arguments must have
the entry's input dtypes and shapes exactly (see `argument`): a float64 array for a float32
input is a TypeError, never a silent cast.

A function that draws random numbers (an entry with `generators`, the names its code gives
the NumPy generators it draws from) takes them as `generators=`: one NumPy `RandomState` or
`Generator` per name, in order, each seeding that call's draws (advancing it, so calls
differ and a seeded program is reproducible), or the seed itself, two uint64 words:

    sample = manifest.load("build/manifest.json", "pkg.vae.grad_elbo")
    grads = sample(*params, x, generators=[np.random.default_rng(0)])

The executable is deserialized from the entry's `.exe` file through jaxlib (no compiler, no
s2s, no jax). Serialized executables only load into the jaxlib version that wrote them: a
mismatch is an error that says to recompile. Constants the function closes over come from
its `.consts.npz` file (plain arrays, never pickles).

An entry is loaded only as one build wrote it: every file it names (executable, constants,
StableHLO, HLO) must have the SHA-256 the manifest records for it (`exe_sha256`,
`consts_sha256`, ...). An executable run on another build's constants computes numbers of
neither build, and a file copied in from another build, or left by a compile that was
killed, is otherwise indistinguishable from the right one; an entry that records no hash
for a file it names is refused as well, never loaded unverified.

A build folder is code: its executables run as native code in this process. The manifest
is still checked as untrusted data, so that a damaged or hand-edited one is a clear
`ManifestError` naming the field, never a raw Python or XLA error or a wrong result: every
file it names must be a regular file inside the build folder (no absolute path, no `..`,
no symlink out, no device or FIFO), its fields must have their types, and the input avals
must be those of the executable itself.
"""
from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import stat
import zipfile
from importlib import metadata

import numpy as np

from s2s_runtime import quiet_logs, xla  # noqa: F401  (quiet_logs: before jaxlib loads)
from s2s_runtime.array import Array
from s2s_runtime.ops import generator_seed
from s2s_runtime.replicated import ReplicatedExecutable, first_devices
from jaxlib import xla_client

MANIFEST_FORMAT = 4   # 2: entries named by module (`pkg.mod.loss`), paths relative;
#                       3: an entry may run as XLA replicas over several devices (`replicas`);
#                       4: entries record their arguments' and results' structures


class ManifestError(Exception):
    """A manifest entry that cannot be loaded (missing, failed, stale, or tampered with)."""


def _jaxlib_version() -> str:
    return metadata.version("jaxlib")


def read(manifest_path: str) -> dict:
    """The manifest as a dict of the known format; anything else is a `ManifestError`."""
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ManifestError(f"{manifest_path}: cannot read the manifest ({e}); "
                            f"recompile with `s2s compile`") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{manifest_path}: a manifest is a JSON object, this is a "
                            f"{type(manifest).__name__}; recompile with `s2s compile`")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{manifest_path}: unknown manifest format {manifest.get('format')!r}; "
                            f"recompile with `s2s compile`")
    return manifest


def _field(where: str, mapping: dict, key: str, kind, describe: str):
    """`mapping[key]` if it is a `kind` (never a bool for an int); else a ManifestError."""
    value = mapping.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"{where}: field {key!r} must be {describe}, got {value!r}; "
                            f"the manifest is damaged: recompile with `s2s compile`")
    return value


def _dtype(where: str, text) -> np.dtype:
    """A plain numeric dtype named by `text` (never an object or structured dtype)."""
    try:
        dtype = np.dtype(text) if isinstance(text, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biufc":
        raise ManifestError(f"{where}: {text!r} is not a numeric dtype name; the manifest is "
                            f"damaged: recompile with `s2s compile`")
    return dtype


def _avals(where: str, entry: dict) -> list[tuple[tuple, np.dtype]]:
    """The entry's `inputs` as (shape, dtype) pairs, checked field by field."""
    avals = []
    for i, aval in enumerate(_field(where, entry, "inputs", list, "a list of avals")):
        at = f"{where} inputs[{i}]"
        if not isinstance(aval, dict):
            raise ManifestError(f"{at}: an aval is an object with 'shape' and 'dtype', got {aval!r}")
        shape = _field(at, aval, "shape", list, "a list of dimensions")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ManifestError(f"{at}: 'shape' must list non-negative ints, got {shape!r}")
        avals.append((tuple(shape), _dtype(at, aval.get("dtype"))))
    return avals


def _read_inside(base: str, where: str, relative) -> bytes:
    """The bytes of the regular file `relative` names inside the build folder `base`."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative) \
            or ".." in relative.replace("\\", "/").split("/") or "\0" in relative:
        raise ManifestError(f"{where}: {relative!r} is not a file name inside the build folder "
                            f"(no absolute path, no '..'); recompile with `s2s compile`")
    path = os.path.join(base, relative)
    real_base = os.path.realpath(base)
    if os.path.commonpath([real_base, os.path.realpath(path)]) != real_base:
        raise ManifestError(f"{where}: {relative!r} resolves outside the build folder {base}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ManifestError(f"{where}: cannot open {path} ({e.strerror}): recompile") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ManifestError(f"{where}: {path} is not a regular file")
        return f.read()


def _verified_files(base: str, where: str, entry: dict) -> dict[str, bytes]:
    """The bytes of every file the entry names, by kind, each checked against the hash the
    entry records for it (`KIND_sha256`)."""
    files = _field(where, entry, "files", dict, "an object of file names")
    if "exe" not in files:
        raise ManifestError(f"{where}: field 'files' names no executable ('exe'); recompile with `s2s compile`")
    contents = {}
    for kind, relative in files.items():
        data = _read_inside(base, f"{where} files.{kind}", relative)
        recorded = entry.get(f"{kind}_sha256")
        if not isinstance(recorded, str):
            raise ManifestError(f"{where}: the entry records no hash of its {kind} file {relative} "
                                f"(field '{kind}_sha256'), so it cannot be checked: recompile with `s2s compile`")
        if hashlib.sha256(data).hexdigest() != recorded:
            raise ManifestError(f"{where}: {relative} does not match the hash its entry records: it "
                                f"was changed, or comes from another build, after this entry was "
                                f"written; recompile with `s2s compile`")
        contents[kind] = data
    return contents


def _consts(where: str, data: bytes, count: int) -> list[np.ndarray]:
    """The `count` arrays c0, c1, ... of a constants file (never a pickle)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return [npz[f"c{i}"] for i in range(count)]
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ManifestError(f"{where}: its constants file does not hold {count} plain arrays "
                            f"({e}); recompile with `s2s compile`") from None


_PYTHON_KINDS = {bool: "b", int: "iu", float: "f", complex: "c"}


def _type_name(shape: tuple, dtype: np.dtype) -> str:
    return f"{dtype.name}[{','.join(map(str, shape))}]"


def argument(name: str, position: int, value, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """`value` as parameter `position` of entry `name` (`dtype`[`shape`]), or a TypeError.

    Like a jitted call's compiled signature: a NumPy array or scalar, or an `s2s.Array` (a
    jitted function's result, passed on where it lives), must have the dtype and the shape
    exactly (float64 is never narrowed to float32 behind your back). A Python
    number, or a nested list of them, is taken as the parameter's dtype when it is of the
    same kind (bool; int for an int dtype, when every value fits; float; complex), as jit
    takes Python numbers as weakly typed."""
    wanted = _type_name(shape, dtype)
    if isinstance(value, (np.ndarray, np.generic, Array)):
        if value.dtype != dtype or value.shape != shape:
            raise TypeError(f"{name}: argument {position} is {_type_name(value.shape, value.dtype)}, "
                            f"the compiled entry takes {wanted}; convert it yourself "
                            f"(np.asarray(x, np.{dtype.name})) or compile an entry for it")
        return value
    try:
        given = np.asarray(value) if isinstance(value, (bool, int, float, complex, list, tuple)) else None
    except ValueError:   # a ragged list
        given = None
    kind = None if given is None else next(
        (k for t, k in _PYTHON_KINDS.items() if given.dtype.kind in k and np.dtype(t).kind in k), None)
    converted = None
    if kind is not None and dtype.kind in kind and given.shape == shape:
        with np.errstate(all="ignore"):
            converted = np.asarray(given, dtype)
        if kind == "iu" and not np.array_equal(converted, given):
            converted = None   # an int that does not fit
    if converted is None:
        got = type(value).__name__ if given is None else f"{type(value).__name__} of {_type_name(given.shape, given.dtype)}"
        raise TypeError(f"{name}: argument {position} is a Python {got}, the compiled entry takes {wanted}; "
                        f"pass np.asarray(x, np.{dtype.name}) of shape {shape}")
    return converted


def _load(where: str, files: dict, deserialize):
    try:
        return deserialize()
    except xla_client.XlaRuntimeError as e:
        raise ManifestError(f"{where}: jaxlib cannot load {files['exe']} ({e}); recompile") from None


def _replicas(where: str, replicas, inputs: list, outputs) -> tuple[int, list, list]:
    """An entry's `replicas` (count, in_axes, out_axes), checked: an axis per input and
    per output, each None or a dimension of that array of size `count`."""
    if not isinstance(replicas, dict):
        raise ManifestError(f"{where}: field 'replicas' must be an object, got {replicas!r}; recompile")
    count = _field(f"{where} replicas", replicas, "count", int, "a number of replicas")
    in_axes = _field(f"{where} replicas", replicas, "in_axes", list, "a list of axes")
    out_axes = _field(f"{where} replicas", replicas, "out_axes", list, "a list of axes")
    shapes = [shape for shape, _ in inputs] + [
        o.get("shape") if isinstance(o, dict) else None for o in (outputs if isinstance(outputs, list) else [])]
    if count < 1 or len(in_axes) != len(inputs) or len(in_axes + out_axes) != len(shapes) or not all(
            a is None or (isinstance(a, int) and not isinstance(a, bool) and isinstance(shape, (list, tuple))
                          and 0 <= a < len(shape) and shape[a] == count)
            for a, shape in zip(in_axes + out_axes, shapes)):
        raise ManifestError(f"{where}: field 'replicas' must give a positive count and an axis (or "
                            f"null) per input and per output, got {replicas!r}; recompile with `s2s compile`")
    return count, in_axes, out_axes


def _seeds(name: str, expected: list, generators) -> list[np.ndarray]:
    """The state of each generator `name`'s code draws from, for one call: a NumPy
    generator is asked for a fresh seed, a seed (two uint64 words) is used as it is."""
    if not expected:
        if generators:
            raise TypeError(f"{name} draws no random numbers: pass no generators=")
        return []
    if generators is None or len(generators) != len(expected):
        raise TypeError(f"{name} draws random numbers: pass generators=[...], one NumPy RandomState or "
                        f"Generator (or a seed of two uint64 words) for each of {expected}")
    seeds = []
    for label, given in zip(expected, generators):
        if isinstance(given, (np.random.RandomState, np.random.Generator)):
            seeds.append(generator_seed(given))
        else:
            seed = np.asarray(given)
            if seed.shape != (2,) or seed.dtype != np.uint64:
                raise TypeError(f"{name}: the seed for {label} must be a NumPy generator or two uint64 "
                                f"words, got {seed.dtype}{list(seed.shape)}")
            seeds.append(seed)
    return seeds


def load(manifest_path: str, name: str, device=None):
    """`name`'s compiled executable as the exported function: it takes the function's own
    arguments (dicts, lists, tuples, namedtuples and dataclasses of arrays, as the manifest
    records them; static arguments as they were compiled) and returns its own result tree.
    On `device` (default: the first), or for an exported pmap (an entry with `replicas`) on
    the first that many devices, called with whole arrays as the pmap is. `load_flat` gives
    the same executable on flat arrays, for callers that have no Python containers."""
    return load_from(read(manifest_path), manifest_path, name, device)


def load_from(manifest: dict, manifest_path: str, name: str, device=None):
    """`load` of an entry of `manifest` (as `read` gives it), whose files lie beside
    `manifest_path`."""
    flat = load_flat_from(manifest, manifest_path, name, device)
    where = f"{manifest_path} entry {name!r}"
    params = _field(where, flat.entry, "params", list, "a list of parameter names")
    in_structure = _checked_structure(f"{where} in_structure", _field(where, flat.entry, "in_structure", dict,
                                                                       "an argument structure"),
                                      "input", len(flat.entry["inputs"]))
    out_structure = _checked_structure(f"{where} out_structure", _field(where, flat.entry, "out_structure", dict,
                                                                         "a result structure"),
                                       "output", len(flat.entry["outputs"]))
    arguments = in_structure.get("tuple")
    if arguments is None or len(arguments) != len(params) or not all(isinstance(p, str) for p in params):
        raise ManifestError(f"{where}: 'params' does not match the argument structure; the manifest is damaged: "
                            f"recompile with `s2s compile`")

    def call(*args, generators=None, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{name} takes {len(params)} arguments ({', '.join(params)}), got {len(args)}")
        bound = dict(zip(params, args))
        for key, value in kwargs.items():
            if key not in params or key in bound:
                raise TypeError(f"{name} got an unexpected or repeated argument {key!r}; it takes "
                                f"({', '.join(params)})")
            bound[key] = value
        missing = [p for p in params if p not in bound]
        if missing:
            raise TypeError(f"{name} is missing the argument(s) {', '.join(missing)}; it takes ({', '.join(params)})")
        flat_args: list = []
        for param, structure in zip(params, arguments):
            _flatten(name, param, structure, bound[param], flat_args)
        return _rebuild(out_structure, flat(*[a for _, a in sorted(flat_args, key=lambda p: p[0])],
                                            generators=generators))

    call.__name__ = name
    call.entry, call.executable, call.flat = flat.entry, flat.executable, flat
    return call


# The structures `load` rebuilds (`s2s.build_plan.tree_structure` writes them):
#   {"input": i} / {"output": i}    a leaf: the i-th flat input or output
#   {"static": value}               a static leaf, compiled for this JSON value
#   {"static_repr": text}           a static leaf JSON cannot hold: no structured call
#   {"tuple": [...]}, {"list": [...]}, {"dict": [[key, child], ...]}, {"none": true}
#   {"record": qualname, "fields": [...], "children": [...]}   a namedtuple or dataclass:
#                                   read by attribute, returned as a namedtuple of its fields
#   {"node": qualname, "children": [...]}   another registered container: no structured call
STRUCTURES = ("input", "output", "static", "static_repr", "tuple", "list", "dict", "none", "record", "node")


def _checked_structure(where: str, structure: dict, leaf: str, count: int) -> dict:
    """`structure` once every node is one of `STRUCTURES` with fields of their types and its
    `leaf` indices are each of range(count) once; else a ManifestError."""
    seen: list[int] = []

    def damaged(node):
        return ManifestError(f"{where}: {node!r} is not a structure node ({', '.join(STRUCTURES)}); the manifest "
                             "is damaged: recompile with `s2s compile`")

    def check(node) -> None:
        if not isinstance(node, dict) or len(node) != (3 if "record" in node else 2 if "node" in node else 1):
            raise damaged(node)
        (kind, value), *rest = node.items()
        if kind == leaf and isinstance(value, int) and not isinstance(value, bool):
            seen.append(value)
        elif kind == "static" and (value is None or type(value) in (bool, int, float, str)):
            pass
        elif kind == "static_repr" and isinstance(value, str) or kind == "none" and value is True:
            pass
        elif kind in ("tuple", "list") and isinstance(value, list):
            for child in value:
                check(child)
        elif kind == "dict" and isinstance(value, list) and all(
                isinstance(p, list) and len(p) == 2 and (p[0] is None or type(p[0]) in (bool, int, float, str))
                for p in value):
            for _, child in value:
                check(child)
        elif kind in ("record", "node") and isinstance(value, str) and value.rpartition(".")[2].isidentifier() \
                and isinstance(node.get("children"), list) \
                and (kind == "node" or isinstance(node.get("fields"), list)
                     and all(isinstance(f, str) and f.isidentifier() for f in node["fields"])
                     and len(node["fields"]) == len(node["children"]) == len(set(node["fields"]))):
            for child in node["children"]:
                check(child)
        else:
            raise damaged(node)
    check(structure)
    if sorted(seen) != list(range(count)):
        raise ManifestError(f"{where}: its leaves do not number the entry's {count} {leaf}s once each; the manifest "
                            "is damaged: recompile with `s2s compile`")
    return structure


def _flatten(name: str, path: str, structure: dict, value, out: list) -> None:
    """Appends (flat index, array) for each staged leaf of `value` (the argument at `path`)
    laid out as `structure`; a container of another kind or size, or a static leaf other
    than the compiled one, is a TypeError naming the path."""
    def wrong(what: str):
        return TypeError(f"{name}: argument {path} {what}")
    if "input" in structure:
        out.append((structure["input"], value))
    elif "static" in structure:
        if value != structure["static"] or type(value) is not type(structure["static"]):
            raise wrong(f"is {value!r}, but the entry was compiled for {structure['static']!r} (static): "
                        "compile an export for that value")
    elif "static_repr" in structure or "node" in structure:
        raise wrong(f"holds {structure.get('static_repr') or structure['node']}, which the manifest cannot "
                    "check or rebuild: call `manifest.load_flat` with the flat arrays")
    elif "none" in structure:
        if value is not None:
            raise wrong(f"is {type(value).__name__}, not None as compiled")
    elif "dict" in structure:
        pairs = structure["dict"]
        if not isinstance(value, dict) or sorted(map(repr, value)) != sorted(repr(k) for k, _ in pairs):
            raise wrong(f"must be a dict with the keys {[k for k, _ in pairs]}")
        for key, child in pairs:
            _flatten(name, f"{path}[{key!r}]", child, value[key], out)
    elif "record" in structure:
        for field, child in zip(structure["fields"], structure["children"]):
            if not hasattr(value, field):
                raise wrong(f"must have the fields {structure['fields']} (a {structure['record']})")
            _flatten(name, f"{path}.{field}", child, getattr(value, field), out)
    else:
        kind = "tuple" if "tuple" in structure else "list"
        children = structure.get(kind)
        if not isinstance(value, (tuple, list)) or len(value) != len(children):
            raise wrong(f"must be a {kind} of {len(children)} items")
        for i, (child, item) in enumerate(zip(children, value)):
            _flatten(name, f"{path}[{i}]", child, item, out)


def _rebuild(structure: dict, outputs: list):
    """The result tree laid out as `structure`, its leaves from the flat `outputs`."""
    if "output" in structure:
        return outputs[structure["output"]]
    if "none" in structure:
        return None
    if "static" in structure:
        return structure["static"]
    if "dict" in structure:
        return {key: _rebuild(child, outputs) for key, child in structure["dict"]}
    if "record" in structure:
        record = collections.namedtuple(structure["record"].rpartition(".")[2], structure["fields"])
        return record(*[_rebuild(child, outputs) for child in structure["children"]])
    if "tuple" in structure:
        return tuple(_rebuild(child, outputs) for child in structure["tuple"])
    return [_rebuild(child, outputs) for child in structure["list"]]


def load_flat(manifest_path: str, name: str, device=None):
    """`name`'s compiled executable on flat arrays: `f(*arrays) -> list[np.ndarray]`, the
    arguments' staged leaves in the order of the entry's `inputs` (a dict's leaves in its
    sorted keys, static arguments left out), the results' leaves in the order of its
    `outputs`: for callers in other languages, or that keep their own layout."""
    return load_flat_from(read(manifest_path), manifest_path, name, device)


def load_flat_from(manifest: dict, manifest_path: str, name: str, device=None):
    """`load_flat` of an entry of `manifest`, a manifest as `read` gives it, whose files lie
    beside `manifest_path`: `s2s compile` checks what it wrote before its manifest names it."""
    entries = _field(manifest_path, manifest, "entries", dict, "an object of entries")
    if name not in entries:
        raise ManifestError(f"{manifest_path} has no entry {name!r}; it has: "
                            f"{', '.join(sorted(map(str, entries))) or '(none)'}")
    entry = entries[name]
    where = f"{manifest_path} entry {name!r}"
    if not isinstance(entry, dict):
        raise ManifestError(f"{where}: an entry is an object, got {entry!r}; recompile")
    if entry.get("status") != "ok":
        raise ManifestError(f"{name} failed to compile ({entry.get('location')}): "
                            f"{entry.get('error')}")
    built_with = manifest.get("jaxlib_version")
    if built_with != _jaxlib_version():
        raise ManifestError(f"{manifest_path} was built with jaxlib {built_with}, this is "
                            f"jaxlib {_jaxlib_version()}: recompile with `s2s compile`")
    contents = _verified_files(os.path.dirname(os.path.abspath(manifest_path)), where, entry)
    files, data = entry["files"], contents["exe"]
    num_consts = _field(where, entry, "num_consts", int, "a number of constants")
    in_dtypes = [_dtype(f"{where} in_dtypes", d)
                 for d in _field(where, entry, "in_dtypes", list, "a list of dtype names")]
    inputs = _avals(where, entry)
    consts = []
    if num_consts:
        if "consts" not in contents:
            raise ManifestError(f"{where}: it takes {num_consts} constants but field 'files' names "
                                f"no constants file ('consts'); recompile with `s2s compile`")
        consts = _consts(where, contents["consts"], num_consts)
    replicas = entry.get("replicas")
    generators = _field(where, entry, "generators", list, "a list of generator names") if "generators" in entry else []
    if replicas is None:
        executable = _load(where, files, lambda: xla.Executable.from_serialized(data, in_dtypes, device))
        run = executable
        parameters_wanted = inputs
    else:
        count, in_axes, out_axes = _replicas(where, replicas, inputs, entry.get("outputs"))
        try:
            chosen = first_devices(count)
        except RuntimeError as e:
            raise ManifestError(f"{where}: {e}") from None
        executable = _load(where, files, lambda: ReplicatedExecutable.from_serialized(data, in_dtypes, chosen))
        # (each replica is given the whole seed: the module folds in its replica index)
        run = lambda *arrays: executable.run_split(list(arrays), [None] * num_consts + in_axes + [None] * len(generators),
                                                   out_axes)
        parameters_wanted = [(shape[:a] + shape[a + 1:] if a is not None else shape, dtype)
                             for (shape, dtype), a in zip(inputs, in_axes)]   # one replica's
    declared = [(c.shape, c.dtype) for c in consts] + parameters_wanted + [((2,), np.dtype(np.uint64))] * len(generators)
    parameters = executable.parameter_types()
    if parameters != declared or [d for _, d in declared] != in_dtypes:
        raise ManifestError(f"{where}: its constants, 'inputs' and 'in_dtypes' do not match the "
                            f"executable's parameters {parameters}; recompile with `s2s compile`")

    def call(*args, generators=None) -> list[np.ndarray]:
        if len(args) != len(inputs):
            raise TypeError(f"{name} takes {len(inputs)} arrays, got {len(args)}")
        return run(*consts, *[argument(name, i, value, shape, dtype)
                              for i, (value, (shape, dtype)) in enumerate(zip(args, inputs))],
                   *_seeds(name, names_drawn_from, generators))

    names_drawn_from = generators
    call.__name__ = name
    call.entry = entry
    call.executable = executable
    return call
