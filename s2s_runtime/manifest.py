"""Loading what `s2s compile` wrote: `load(manifest_path, name)` → a callable.

    from s2s_runtime import manifest
    grad_loss = manifest.load("build/manifest.json", "pkg.models.dense.grad_loss")
    (dW, db) = grad_loss(W, b, x, y)      # flat NumPy arrays in, a list of NumPy arrays out

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

MANIFEST_FORMAT = 3   # 2: entries named by module (`pkg.mod.loss`), paths relative;
#                       3: an entry may run as XLA replicas over several devices (`replicas`)


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
    """`name`'s compiled executable as `f(*flat_arrays) -> list[np.ndarray]`, on `device`
    (default: the first), or for an exported pmap (an entry with `replicas`) on the first
    that many devices, called with whole arrays as the pmap is."""
    return load_from(read(manifest_path), manifest_path, name, device)


def load_from(manifest: dict, manifest_path: str, name: str, device=None):
    """`load` of an entry of `manifest`, a manifest as `read` gives it, whose files lie beside
    `manifest_path`: `s2s compile` checks what it wrote before its manifest names it."""
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
