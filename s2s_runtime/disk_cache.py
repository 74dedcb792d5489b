"""An on-disk cache of compiled executables, independent of jaxlib.

Entries are files named by the sha256 of the key parts (StableHLO text, jaxlib version,
platform, compile-options description, device count). Each file is a small header
(magic, format version, payload length, sha256 of the payload) followed by the payload: the
raw bytes of ``client.serialize_executable(exe)``. Entries are plain bytes checked by hash, never a Python object format.

Location: ``S2S_CACHE_DIR`` (default ``~/.cache/s2s``). Disabled by ``S2S_DISK_CACHE=0``.
Both are read at each call unless :func:`configure` set them explicitly.

A truncated or corrupt entry is logged, deleted, and compiled again; a failure to read or
write the cache never fails a compile. Writes go to a temporary file in the same directory
followed by ``os.replace``, so concurrent writers of one key are both fine. The directory is
kept under a size cap (default 1 GiB) by deleting the least recently used entries (by mtime;
a hit touches its entry).
"""
from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
from typing import Any, Callable

log = logging.getLogger("s2s_runtime.disk_cache")

MAGIC = b"S2SXC"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">5sBQ32s")  # magic, format version, payload length, sha256(payload)
SUFFIX = ".s2sx"
DEFAULT_MAX_BYTES = 1 << 30

_lock = threading.Lock()
_settings: dict[str, Any] = {"enabled": None, "directory": None, "max_bytes": None}


def configure(enabled: bool | None = None, directory: str | os.PathLike | None = None,
              max_bytes: int | None = None) -> None:
    """Set the cache's settings; None leaves a setting to the environment / default."""
    with _lock:
        _settings["enabled"] = enabled
        _settings["directory"] = None if directory is None else os.fspath(directory)
        _settings["max_bytes"] = max_bytes


def enabled() -> bool:
    if _settings["enabled"] is not None:
        return bool(_settings["enabled"])
    return os.environ.get("S2S_DISK_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def directory() -> str:
    if _settings["directory"] is not None:
        return _settings["directory"]
    env = os.environ.get("S2S_CACHE_DIR")
    return env if env else os.path.join(os.path.expanduser("~"), ".cache", "s2s")


def max_bytes() -> int:
    if _settings["max_bytes"] is not None:
        return int(_settings["max_bytes"])
    env = os.environ.get("S2S_CACHE_MAX_BYTES")
    return int(env) if env else DEFAULT_MAX_BYTES


def cache_key(key_parts: tuple[str, ...]) -> str:
    """The hex sha256 of the key parts (each length-prefixed, so no two tuples collide)."""
    h = hashlib.sha256()
    h.update(b"s2s-disk-cache-v%d\0" % FORMAT_VERSION)
    for part in key_parts:
        data = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        h.update(struct.pack(">Q", len(data)))
        h.update(data)
    return h.hexdigest()


def entry_path(key_parts: tuple[str, ...]) -> str:
    return os.path.join(directory(), cache_key(key_parts) + SUFFIX)


def encode(payload: bytes) -> bytes:
    payload = bytes(payload)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest()) + payload


def decode(blob: bytes) -> bytes:
    """The payload of an entry; ValueError when the entry is truncated or corrupt."""
    if len(blob) < _HEADER.size:
        raise ValueError(f"entry too short ({len(blob)} bytes)")
    magic, version, length, digest = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise ValueError("bad magic bytes")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, expected {FORMAT_VERSION}")
    payload = blob[_HEADER.size:]
    if len(payload) != length:
        raise ValueError(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("payload checksum mismatch")
    return payload


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("s2s disk cache: cannot read %s: %s", path, e)
        return None


def _write(path: str, blob: bytes) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def evict(limit: int | None = None, keep: str | None = None) -> int:
    """Delete least recently used entries until the directory's entries fit in ``limit``
    bytes (never ``keep``); returns the number of bytes freed."""
    limit = max_bytes() if limit is None else limit
    folder = directory()
    entries = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    entries.append((st.st_mtime_ns, e.path, st.st_size))
    except OSError:
        return 0
    total = sum(size for _, _, size in entries)
    freed = 0
    for _, path, size in sorted(entries):
        if total <= limit:
            break
        if keep is not None and os.path.abspath(path) == os.path.abspath(keep):
            continue
        _remove(path)
        total -= size
        freed += size
    return freed


def get_or_compile(key_parts: tuple[str, ...], compile_fn: Callable[[], Any],
                   serialize: Callable[[Any], bytes],
                   deserialize: Callable[[bytes], Any]) -> tuple[Any, bool]:
    """The executable for ``key_parts``: loaded from disk when cached, else compiled (and
    stored). Returns ``(executable, hit)``."""
    if not enabled():
        return compile_fn(), False
    path = entry_path(key_parts)
    blob = _read(path)
    if blob is not None:
        try:
            payload = decode(blob)
            exe = deserialize(payload)
        except Exception as e:  # corrupt, truncated, or not loadable by this jaxlib
            log.warning("s2s disk cache: discarding bad entry %s: %s", path, e)
            _remove(path)
        else:
            try:
                os.utime(path)
            except OSError:
                pass
            return exe, True
    exe = compile_fn()
    try:
        blob = encode(serialize(exe))
        _write(path, blob)
        evict(keep=path)
    except Exception as e:
        log.warning("s2s disk cache: cannot store %s: %s", path, e)
    return exe, False
