"""An on-disk cache of compiled executables, independent of jaxlib.

A cached executable is native code: it is served only for the exact key it was compiled for.
Entries are files named by the sha256 of the key parts (StableHLO text, jaxlib version,
platform and its version, device kind and count, the compile options, the XLA flags, the
host CPU). Each file is a small header (magic, format version, key length, payload length,
sha256 of key and payload), the full key parts, then the payload: the raw bytes of
``client.serialize_executable(exe)``. On load the stored key is compared with the wanted one,
so an entry copied or renamed over another key's file is a miss (and is replaced), never a
hit. Entries are plain bytes checked by hash, never a Python object format.

Location: ``S2S_CACHE_DIR`` (default ``~/.cache/s2s``). Disabled by ``S2S_DISK_CACHE=0``.
Both are read at each call unless :func:`configure` set them explicitly. The folder is
created 0700; like ssh and pip, a folder or an entry owned by another user or writable by
group or others is refused (a warning once per process, then the compile runs uncached).

A truncated, corrupt, foreign-key or old-format entry is logged, deleted, and compiled again;
a failure to read or write the cache never fails a compile. Writes go to a temporary file in
the same directory followed by ``os.replace``, so concurrent writers of one key are both
fine. The directory is kept under a size cap (default 1 GiB) by deleting the least recently
used entries (by mtime; a hit touches its entry); the temporary files of writers at work
count toward the cap, and those a killed writer left behind are deleted. Each process keeps
a running estimate of the folder's size and rescans it only at its first store and when the
estimate passes the cap; a rescan evicts down to 90% of the cap, so a store is O(1) amortized.
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import stat
import struct
import tempfile
import threading
import time
from typing import Any, Callable

log = logging.getLogger("s2s_runtime.disk_cache")

MAGIC = b"S2SXC"
FORMAT_VERSION = 2   # 2: the entry stores its full key; version-1 entries are misses
_HEADER = struct.Struct(">5sBQQ32s")  # magic, version, key length, payload length, sha256(key + payload)
SUFFIX = ".s2sx"
TEMP_PREFIX, TEMP_SUFFIX = ".tmp-", ".part"   # an entry being written
# A temporary file untouched this long is a killed writer's (a store writes its entry at
# once): a rescan removes it. Removing a live one only fails that store, with a warning.
STALE_TEMP_SECONDS = 3600
DEFAULT_MAX_BYTES = 1 << 30
EVICT_TO_FRACTION = 0.9   # a rescan frees this much headroom, so the next is many stores away

_lock = threading.Lock()
_settings: dict[str, Any] = {"enabled": None, "directory": None, "max_bytes": None}
_size_estimates: dict[str, int] = {}   # folder -> bytes this process believes it holds
_warned: set[str] = set()              # paths already refused (warn once per process)


class KeyMismatch(ValueError):
    """An intact entry that was stored for another key."""


def configure(enabled: bool | None = None, directory: str | os.PathLike | None = None,
              max_bytes: int | None = None) -> None:
    """Set the cache's settings; None leaves a setting to the environment / default."""
    with _lock:
        _settings["enabled"] = enabled
        _settings["directory"] = None if directory is None else os.fspath(directory)
        _settings["max_bytes"] = max_bytes
        _size_estimates.clear()


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


def encode_key(key_parts: tuple[str, ...]) -> bytes:
    """The key parts as one byte string, each length-prefixed so no two tuples collide."""
    chunks = []
    for part in key_parts:
        data = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        chunks.append(struct.pack(">Q", len(data)))
        chunks.append(data)
    return b"".join(chunks)


_process_environment: tuple[str, ...] | None = None


def process_environment() -> tuple[str, ...]:
    """The key parts the process, not the computation, decides: ``XLA_FLAGS`` and the host
    CPU. XLA parses ``XLA_FLAGS`` once per process, so its value at the first call is the one
    compiles use; XLA:CPU compiles for the host CPU's features, so an executable built on one
    CPU may crash (illegal instruction) or differ on another. jaxlib's CPU client does not
    report the features, so they are read from /proc/cpuinfo where there is one."""
    global _process_environment
    if _process_environment is None:
        _process_environment = ("XLA_FLAGS=" + os.environ.get("XLA_FLAGS", ""),
                                "host CPU " + _host_cpu_description())
    return _process_environment


def _host_cpu_description() -> str:
    described = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("vendor_id", "model name", "flags", "Features", "CPU part"):
                    described.append(f"{name.strip()}: {value.strip()}")
                elif not line.strip() and len(described) > 2:
                    break   # the first processor's block describes them all
    except OSError:
        pass
    return "; ".join(described)


def cache_key(key_parts: tuple[str, ...]) -> str:
    """The hex sha256 of the key parts: the entry's file name."""
    return hashlib.sha256(b"s2s-disk-cache-v%d\0" % FORMAT_VERSION + encode_key(key_parts)).hexdigest()


def entry_path(key_parts: tuple[str, ...]) -> str:
    return os.path.join(directory(), cache_key(key_parts) + SUFFIX)


def encode(key_parts: tuple[str, ...], payload: bytes) -> bytes:
    """An entry: header, the full key, the payload."""
    key, payload = encode_key(key_parts), bytes(payload)
    digest = hashlib.sha256(key + payload).digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(key), len(payload), digest) + key + payload


def decode(blob: bytes, key_parts: tuple[str, ...]) -> bytes:
    """The payload of an entry stored for ``key_parts``; ValueError when the entry is
    truncated, corrupt or of another format, KeyMismatch when it is intact but another key's."""
    if len(blob) < _HEADER.size:
        raise ValueError(f"entry too short ({len(blob)} bytes)")
    magic, version, key_length, payload_length, digest = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise ValueError("bad magic bytes")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, expected {FORMAT_VERSION}")
    body = blob[_HEADER.size:]
    if len(body) != key_length + payload_length:
        raise ValueError(f"body is {len(body)} bytes, header says {key_length + payload_length}")
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    if body[:key_length] != encode_key(key_parts):
        raise KeyMismatch("entry was stored for another key")
    return body[key_length:]


def _current_uid() -> int | None:
    """This process's effective uid (None where the OS has none: nothing to compare)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def _unsafe(st: os.stat_result) -> str | None:
    """Why a folder or entry with this stat is not to be trusted, or None."""
    uid = _current_uid()
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _refuse(path: str, why: str, what: str, instead: str) -> None:
    """Warn, once per process and path, that an untrusted folder or entry is not used."""
    with _lock:
        if path in _warned:
            return
        _warned.add(path)
    log.warning("s2s disk cache: not using %s %s: it is %s; %s. Make the cache yours and not "
                "group/other-writable (chown it to your user, chmod 700 the folder and 600 its "
                "entries), or point S2S_CACHE_DIR at a folder of your own.", what, path, why, instead)


def _safe_folder(folder: str) -> bool:
    """Creates the folder 0700 if missing; whether it is this user's and not writable by others."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.stat(folder)
    except OSError as e:
        log.warning("s2s disk cache: cannot use %s: %s", folder, e)
        return False
    why = _unsafe(st)
    if why is not None:
        _refuse(folder, why, "cache folder", "running uncached")
        return False
    return True


def _remove(path: str) -> bool:
    """Deletes `path`; whether it did."""
    try:
        os.remove(path)
    except OSError:
        return False
    return True


def _read(path: str) -> bytes | None:
    """The entry's bytes; None when missing, unreadable, not a plain file (a symlink is not
    followed), or not safe to trust."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("s2s disk cache: cannot read %s: %s", path, e)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("s2s disk cache: cannot read %s: not a plain file", path)
            return None
        why = _unsafe(st)
        if why is not None:
            _refuse(path, why, "cache entry",
                    "compiling again and storing this user's own entry in its place")
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError as e:
        log.warning("s2s disk cache: cannot read %s: %s", path, e)
        return None
    finally:
        os.close(fd)


def _write(path: str, blob: bytes) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=folder)   # mode 0600
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
    """Delete least recently used entries until the directory's entries and temporary
    files fit in ``limit`` bytes (never ``keep``), after the temporary files of killed
    writers (see STALE_TEMP_SECONDS); returns the number of bytes freed. Records the size
    left as this process's estimate of the folder's size."""
    limit = max_bytes() if limit is None else limit
    folder = directory()
    entries = []
    total = freed = 0
    stale = time.time() - STALE_TEMP_SECONDS
    try:
        with os.scandir(folder) as it:
            for e in it:
                temporary = e.name.startswith(TEMP_PREFIX) and e.name.endswith(TEMP_SUFFIX)
                if not (temporary or e.name.endswith(SUFFIX)) or not e.is_file(follow_symlinks=False):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if temporary and st.st_mtime < stale and _remove(e.path):
                    freed += st.st_size
                    continue
                total += st.st_size
                if not temporary:   # a writer's at work is counted, never evicted
                    entries.append((st.st_mtime_ns, e.path, st.st_size))
    except OSError:
        return 0
    for _, path, size in sorted(entries):
        if total <= limit:
            break
        if keep is not None and os.path.abspath(path) == os.path.abspath(keep):
            continue
        _remove(path)
        total -= size
        freed += size
    with _lock:
        _size_estimates[folder] = total
    return freed


def _account_store(path: str, size: int) -> None:
    """Add a stored entry to the folder's size estimate; rescan and evict (down to
    EVICT_TO_FRACTION of the cap) only at the first store and when the estimate passes the cap.
    A replaced entry is counted twice, which only brings the next rescan closer."""
    folder, cap = directory(), max_bytes()
    with _lock:
        estimate = _size_estimates.get(folder)
        if estimate is not None:
            estimate += size
            _size_estimates[folder] = estimate
    if estimate is None:
        evict(cap, keep=path)
    elif estimate > cap:
        evict(int(cap * EVICT_TO_FRACTION), keep=path)


def get_or_compile(key_parts: tuple[str, ...], compile_fn: Callable[[], Any],
                   serialize: Callable[[Any], bytes],
                   deserialize: Callable[[bytes], Any]) -> tuple[Any, bool]:
    """The executable for ``key_parts``: loaded from disk when an entry stored for exactly
    this key is there, else compiled (and stored). Returns ``(executable, hit)``."""
    if not enabled() or not _safe_folder(directory()):
        return compile_fn(), False
    path = entry_path(key_parts)
    blob = _read(path)
    if blob is not None:
        try:
            exe = deserialize(decode(blob, key_parts))
        except Exception as e:  # corrupt, truncated, another key's, or not loadable by this jaxlib
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
        blob = encode(key_parts, serialize(exe))
        _write(path, blob)
        _account_store(path, len(blob))
    except Exception as e:
        log.warning("s2s disk cache: cannot store %s: %s", path, e)
    return exe, False
