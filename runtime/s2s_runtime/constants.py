"""Loading the constants that emitted modules do not write out as literals."""
from __future__ import annotations

import base64
import os

import numpy as np


def array_from_base64(text: str, dtype: str, shape: tuple) -> np.ndarray:
    """Decodes a little-endian raw buffer written by the emitter."""
    raw = base64.b64decode(text)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def load_npz(module_file: str, name: str) -> dict:
    """The arrays of the sidecar `name` beside `module_file` (never pickled objects)."""
    path = os.path.join(os.path.dirname(os.path.abspath(module_file)), name)
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}
