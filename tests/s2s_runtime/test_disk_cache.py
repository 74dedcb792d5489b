"""The on-disk executable cache: fake compile functions for the cache logic, jaxlib for the
round trip through s2s_runtime/xla.py's Executable, subprocesses for cross-process behaviour."""
import hashlib
import logging
import os
import re
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from s2s_runtime import disk_cache
from tests.concurrency import run_together
from tests.reliability import MULTIPLY_ADD_MODULE, isolated_cache_dir

RUNTIME_DIR = Path(disk_cache.__file__).resolve().parent

@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache directory (via the environment, so subprocesses too)."""
    yield from isolated_cache_dir(tmp_path, monkeypatch)


class Fake:
    """A fake 'executable' whose serialized form is its payload bytes."""

    def __init__(self, payload: bytes):
        self.payload = payload


def fake_fns(payload=b"compiled-executable", calls=None):
    calls = calls if calls is not None else []

    def compile_fn():
        calls.append("compile")
        return Fake(payload)

    return compile_fn, (lambda exe: exe.payload), (lambda b: Fake(bytes(b))), calls


def entries(d):
    return sorted(p for p in Path(d).glob("*" + disk_cache.SUFFIX)) if Path(d).exists() else []


# ---------------------------------------------------------------- cache logic (no jaxlib)

def test_miss_then_hit(cache_dir):
    compile_fn, ser, de, calls = fake_fns()
    exe, hit = disk_cache.get_or_compile(("text", "v", "cpu", "opts", "1"), compile_fn, ser, de)
    assert (hit, exe.payload, calls) == (False, b"compiled-executable", ["compile"])
    exe, hit = disk_cache.get_or_compile(("text", "v", "cpu", "opts", "1"), compile_fn, ser, de)
    assert (hit, exe.payload, calls) == (True, b"compiled-executable", ["compile"])
    [entry] = entries(cache_dir)
    assert re.fullmatch(r"[0-9a-f]{64}" + re.escape(disk_cache.SUFFIX), entry.name)


def test_every_key_part_matters():
    base = ("text", "0.10.2", "cpu", "default-options", "1")
    keys = {disk_cache.cache_key(base)}
    for i in range(len(base)):
        keys.add(disk_cache.cache_key(base[:i] + (base[i] + "x",) + base[i + 1:]))
    keys.add(disk_cache.cache_key(("ab", "c")))
    keys.add(disk_cache.cache_key(("a", "bc")))
    assert len(keys) == len(base) + 3


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty", "bad_version"])
def test_corrupt_entry_is_logged_replaced_and_recompiled(cache_dir, caplog, damage):
    key = ("text", "damaged", damage)
    compile_fn, ser, de, calls = fake_fns(b"x" * 1000)
    disk_cache.get_or_compile(key, compile_fn, ser, de)
    [entry] = entries(cache_dir)
    good = entry.read_bytes()
    bad = {"truncate": good[:len(good) // 2], "garbage": os.urandom(len(good)),
           "flip": good[:-1] + bytes([good[-1] ^ 1]), "empty": b"",
           "bad_version": good[:5] + bytes([99]) + good[6:]}[damage]
    entry.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = disk_cache.get_or_compile(key, compile_fn, ser, de)
    assert not hit and exe.payload == b"x" * 1000 and calls == ["compile", "compile"]
    assert any(r.name == "s2s_runtime.disk_cache" and r.levelno == logging.WARNING
               for r in caplog.records)
    assert entry.read_bytes() == good          # replaced by a valid entry
    assert disk_cache.get_or_compile(key, compile_fn, ser, de)[1]


def test_deserialize_failure_is_a_miss(cache_dir, caplog):
    compile_fn, ser, _, calls = fake_fns()
    disk_cache.get_or_compile(("k",), compile_fn, ser, lambda b: Fake(b))

    def broken(_):
        raise RuntimeError("incompatible executable")

    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = disk_cache.get_or_compile(("k",), compile_fn, ser, broken)
    assert not hit and calls == ["compile", "compile"]
    assert "incompatible executable" in caplog.text


def test_unwritable_directory_still_compiles(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    disk_cache.configure(directory=blocker / "sub")
    compile_fn, ser, de, _ = fake_fns()
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = disk_cache.get_or_compile(("k",), compile_fn, ser, de)
    assert not hit and exe.payload == b"compiled-executable"
    assert "cannot use" in caplog.text


def test_folder_in_place_of_an_entry_still_compiles(cache_dir, caplog):
    Path(disk_cache.entry_path(("k",))).mkdir(parents=True)
    compile_fn, ser, de, calls = fake_fns()
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = disk_cache.get_or_compile(("k",), compile_fn, ser, de)
    assert (hit, exe.payload, calls) == (False, b"compiled-executable", ["compile"])
    assert "cannot read" in caplog.text


def test_lru_eviction_under_a_small_cap(cache_dir):
    """Passing the cap evicts least recently used entries down to 90% of it (headroom, so the
    next rescan is many stores away)."""
    payload = b"p" * 1000
    size = len(disk_cache.encode(("k0",), payload))     # every key here is two characters
    disk_cache.configure(max_bytes=10 * size)
    compile_fn, ser, de, calls = fake_fns(payload)
    names = [f"k{i}" for i in range(10)]
    for i, name in enumerate(names):
        disk_cache.get_or_compile((name,), compile_fn, ser, de)
        os.utime(disk_cache.entry_path((name,)), ns=(10**18 + i * 10**9,) * 2)   # oldest to newest
    assert len(entries(cache_dir)) == 10
    assert disk_cache.get_or_compile(("k0",), compile_fn, ser, de)[1]     # hit touches k0
    disk_cache.get_or_compile(("kn",), compile_fn, ser, de)              # evicts k1 and k2, the LRU
    kept = {os.path.basename(disk_cache.entry_path((name,))) for name in names + ["kn"]
            if name not in ("k1", "k2")}
    assert {p.name for p in entries(cache_dir)} == kept
    assert sum(p.stat().st_size for p in entries(cache_dir)) <= 9 * size


def test_old_format_entry_is_a_miss_and_replaced(cache_dir, caplog):
    """A version-1 entry (no stored key) cannot show which key it was compiled for."""
    key, payload = ("text", "v1"), b"old payload"
    version_1 = struct.pack(">5sBQ32s", disk_cache.MAGIC, 1, len(payload),
                            hashlib.sha256(payload).digest()) + payload
    path = Path(disk_cache.entry_path(key))
    path.parent.mkdir(mode=0o700)
    path.write_bytes(version_1)
    compile_fn, ser, de, calls = fake_fns(b"new payload")
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = disk_cache.get_or_compile(key, compile_fn, ser, de)
    assert (hit, exe.payload, calls) == (False, b"new payload", ["compile"])
    assert "format version 1, expected 2" in caplog.text
    assert disk_cache.decode(path.read_bytes(), key) == b"new payload"


def test_stores_do_not_rescan_the_folder(cache_dir, monkeypatch):
    """The folder is scanned at the first store and again only when the running size
    estimate passes the cap, so a store is O(1) amortized however many entries there are."""
    scans = []
    evict = disk_cache.evict
    monkeypatch.setattr(disk_cache, "evict", lambda *a, **k: scans.append(1) or evict(*a, **k))
    compile_fn, ser, de, _ = fake_fns(b"p" * 100)
    size = len(disk_cache.encode(("k000",), b"p" * 100))     # every key here is four characters
    disk_cache.configure(max_bytes=50 * size)

    def store(first, last):
        for i in range(first, last):
            disk_cache.get_or_compile((f"k{i:03d}",), compile_fn, ser, de)

    store(0, 50)                  # up to the cap: only the first store scans
    assert len(scans) == 1 and len(entries(cache_dir)) == 50
    store(50, 51)                 # past the cap: one rescan, down to 90% of it
    assert len(scans) == 2 and len(entries(cache_dir)) == 45
    store(51, 56)
    assert len(scans) == 2 and len(entries(cache_dir)) == 50


def test_cap_smaller_than_one_entry_keeps_the_new_entry(cache_dir):
    disk_cache.configure(max_bytes=10)
    compile_fn, ser, de, _ = fake_fns()
    disk_cache.get_or_compile(("a",), compile_fn, ser, de)
    disk_cache.get_or_compile(("b",), compile_fn, ser, de)
    assert [p.name for p in entries(cache_dir)] == [os.path.basename(disk_cache.entry_path(("b",)))]


def test_disabled_by_configure_writes_nothing(cache_dir):
    disk_cache.configure(enabled=False)
    compile_fn, ser, de, calls = fake_fns()
    for _ in range(2):
        assert disk_cache.get_or_compile(("k",), compile_fn, ser, de)[1] is False
    assert calls == ["compile", "compile"] and not cache_dir.exists()


def test_disabled_by_environment_writes_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("S2S_DISK_CACHE", "0")
    compile_fn, ser, de, calls = fake_fns()
    for _ in range(2):
        assert disk_cache.get_or_compile(("k",), compile_fn, ser, de)[1] is False
    assert calls == ["compile", "compile"] and not cache_dir.exists()


def test_configure_directory_overrides_environment(tmp_path, cache_dir):
    other = tmp_path / "other"
    disk_cache.configure(directory=other)
    compile_fn, ser, de, _ = fake_fns()
    disk_cache.get_or_compile(("k",), compile_fn, ser, de)
    assert len(entries(other)) == 1 and not entries(cache_dir)


def test_default_directory(monkeypatch):
    monkeypatch.delenv("S2S_CACHE_DIR")
    assert disk_cache.directory() == os.path.join(os.path.expanduser("~"), ".cache", "s2s")


def test_concurrent_threads_same_key(cache_dir):
    payload = b"z" * 50_000
    results = []

    def compile_fn():
        time.sleep(0.01)
        return Fake(payload)

    def work():
        exe, _ = disk_cache.get_or_compile(("same",), compile_fn, lambda e: e.payload,
                                           lambda b: Fake(bytes(b)))
        results.append(exe.payload)
    errors = run_together(work, 8)
    assert not errors and results == [payload] * 8
    [entry] = entries(cache_dir)
    assert disk_cache.decode(entry.read_bytes(), ("same",)) == payload
    assert not [p for p in cache_dir.iterdir() if p.suffix != disk_cache.SUFFIX]  # no temp files


WRITER = textwrap.dedent("""
    import sys, time
    from s2s_runtime import disk_cache
    payload = sys.argv[1].encode() * 20000
    go = float(sys.argv[2])
    while time.time() < go:
        time.sleep(0.001)
    class Fake:
        def __init__(self, p): self.p = p
    bad = 0
    for i in range(40):
        # each process both rewrites the entry and reads it back: a reader must never see
        # a half-written file
        disk_cache._write(disk_cache.entry_path(("shared",)), disk_cache.encode(("shared",), payload))
        blob = open(disk_cache.entry_path(("shared",)), "rb").read()
        disk_cache.decode(blob, ("shared",))
    exe, hit = disk_cache.get_or_compile(("slow",), lambda: (time.sleep(0.2), Fake(payload))[1],
                                         lambda e: e.p, lambda b: Fake(bytes(b)))
    assert exe.p in (b"a" * 20000, b"b" * 20000)
    print("ok", hit)
""")


def test_concurrent_processes_same_key(cache_dir):
    go = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, tag, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in "ab"]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("ok")
    for key in (("shared",), ("slow",)):
        payload = disk_cache.decode(Path(disk_cache.entry_path(key)).read_bytes(), key)
        assert payload in (b"a" * 20000, b"b" * 20000)
    assert not [p for p in cache_dir.iterdir() if p.suffix != disk_cache.SUFFIX]


def test_no_pickle_in_the_module():
    source = Path(disk_cache.__file__).read_text()
    assert not re.search(r"\b(c?pickle|marshal|shelve|dill)\b", source)


def test_runtime_cache_module_imports_no_jax_or_s2s():
    code = ("import sys; import s2s_runtime.disk_cache; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 's2s')]; "
            "print(bad); assert not bad")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)


# ---------------------------------------------------------------- through jaxlib

CHILD = textwrap.dedent("""
    import json, numpy as np
    from s2s_runtime.xla import Executable
    exe = Executable(%r, ["float32"])
    out = exe(np.array([1.0, 2.0, 3.0], dtype=np.float32))[0]
    print(json.dumps({"hit": exe.cache_hit, "out": out.tolist()}))
""") % MULTIPLY_ADD_MODULE


def run_child():
    import json
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_executable_hit_across_processes(cache_dir):
    first = run_child()
    assert first == {"hit": False, "out": [2.0, 6.0, 12.0]}
    assert len(entries(cache_dir)) == 1
    second = run_child()
    assert second == {"hit": True, "out": [2.0, 6.0, 12.0]}


def test_executable_corrupt_entry_recompiles(cache_dir, caplog):
    from s2s_runtime import xla
    from s2s_runtime.xla import Executable
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    exe = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    assert exe.cache_hit is False
    [entry] = entries(cache_dir)
    good_size = entry.stat().st_size
    entry.write_bytes(entry.read_bytes()[: good_size // 3])
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        again = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    assert again.cache_hit is False and "bad entry" in caplog.text
    np.testing.assert_array_equal(again(x)[0], x * x + x)
    key = xla.disk_cache_key(MULTIPLY_ADD_MODULE, again.device, xla.placement(again.device)[1])
    assert disk_cache.decode(entry.read_bytes(), key)      # replaced by a valid entry
    third = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    assert third.cache_hit is True
    np.testing.assert_array_equal(third(x)[0], x * x + x)


def test_executable_with_cache_disabled(cache_dir, monkeypatch):
    from s2s_runtime.xla import Executable
    monkeypatch.setenv("S2S_DISK_CACHE", "0")
    exe = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    assert exe.cache_hit is False and not cache_dir.exists()
    np.testing.assert_array_equal(exe(np.ones(3, np.float32))[0], np.full(3, 2.0, np.float32))


def test_a_killed_writers_temporary_file_is_counted_and_removed(cache_dir):
    """SIGKILL while storing an entry leaves its temporary file behind (3 kills in 20),
    which eviction neither counted nor removed, so the folder could outgrow its cap for
    good. A rescan deletes one long untouched (STALE_TEMP_SECONDS) and counts its bytes as
    freed; a fresh one (a writer at work) counts toward the cap and is kept."""
    compile_fn, ser, de, _ = fake_fns()
    disk_cache.get_or_compile(("k",), compile_fn, ser, de)
    [entry] = entries(cache_dir)
    killed, writing = cache_dir / ".tmp-killed.part", cache_dir / ".tmp-writing.part"
    killed.write_bytes(b"k" * 5000)
    writing.write_bytes(b"w" * 3000)
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(killed, (two_days_ago, two_days_ago))
    assert disk_cache.evict() == 5000
    assert not killed.exists() and writing.exists() and entry.exists()
    size = entry.stat().st_size
    assert disk_cache._size_estimates[str(cache_dir)] == size + 3000
    assert disk_cache.evict(limit=size + 2999) == size    # the writer's bytes count: the entry goes
    assert writing.exists() and not entry.exists()
