"""Loading what `s2s compile` wrote: `load(manifest_path, name)` → a callable.

    from s2s_runtime import manifest
    grad_loss = manifest.load("build/manifest.json", "grad_loss")
    (dW, db) = grad_loss(W, b, x, y)      # flat NumPy arrays in, a list of NumPy arrays out

The executable is deserialized from NAME.exe through jaxlib (no compiler, no s2s, no jax).
Serialized executables only load into the jaxlib version that wrote them: a mismatch is an
error that says to recompile. Constants the function closes over come from NAME.consts.npz
(plain arrays, never pickles).
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata

import numpy as np

from s2s_runtime import xla

MANIFEST_FORMAT = 1


class ManifestError(Exception):
    """A manifest entry that cannot be loaded (missing, failed, stale, or tampered with)."""


def _jaxlib_version() -> str:
    return metadata.version("jaxlib")


def read(manifest_path: str) -> dict:
    with open(manifest_path) as f:
        manifest = json.load(f)
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{manifest_path}: unknown manifest format {manifest.get('format')!r}")
    return manifest


def load(manifest_path: str, name: str, device=None):
    """`name`'s compiled executable as `f(*flat_arrays) -> list[np.ndarray]`."""
    manifest = read(manifest_path)
    entries = manifest.get("entries", {})
    if name not in entries:
        raise ManifestError(f"{manifest_path} has no entry {name!r}; it has: "
                            f"{', '.join(sorted(entries)) or '(none)'}")
    entry = entries[name]
    if entry.get("status") != "ok":
        raise ManifestError(f"{name} failed to compile ({entry.get('location')}): "
                            f"{entry.get('error')}")
    built_with = manifest.get("jaxlib_version")
    if built_with != _jaxlib_version():
        raise ManifestError(f"{manifest_path} was built with jaxlib {built_with}, this is "
                            f"jaxlib {_jaxlib_version()}: recompile with `s2s compile`")
    base = os.path.dirname(os.path.abspath(manifest_path))
    with open(os.path.join(base, entry["files"]["exe"]), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != entry["exe_sha256"]:
        raise ManifestError(f"{entry['files']['exe']} does not match its manifest entry: recompile")
    consts = []
    if entry.get("num_consts"):
        with np.load(os.path.join(base, entry["files"]["consts"]), allow_pickle=False) as npz:
            consts = [npz[f"c{i}"] for i in range(entry["num_consts"])]
    executable = xla.Executable.from_serialized(data, entry["in_dtypes"], device)
    inputs = [(tuple(a["shape"]), np.dtype(a["dtype"])) for a in entry["inputs"]]

    def call(*args) -> list[np.ndarray]:
        if len(args) != len(inputs):
            raise TypeError(f"{name} takes {len(inputs)} arrays, got {len(args)}")
        for i, (value, (shape, dtype)) in enumerate(zip(args, inputs)):
            if np.shape(value) != shape:
                raise TypeError(f"{name}: argument {i} has shape {np.shape(value)}, "
                                f"expected {shape} ({dtype.name})")
        return executable(*consts, *args)

    call.__name__ = name
    call.entry = entry
    call.executable = executable
    return call
