"""`s2s compile PATH... --out build/ [-j N] [--force] [--no-verify]`: ahead-of-time
compilation of every export.

Each (function, transform) that the modules under PATH declare with `@s2s.export` is an
entry named by its module's dotted name and its stem (`pkg.models.dense.grad_loss`; see
s2s/build_plan.py for how modules are imported and named). Into the output folder go

    NAME.HASH.mlir         the StableHLO text (locations relative to the compiled root)
    NAME.HASH.hlo.txt      XLA's (unoptimized) HLO, with its source metadata
    NAME.HASH.exe          the serialized XLA executable (load with `s2s_runtime.manifest.load`)
    NAME.HASH.consts.npz   the constants it closes over, when there are any

(HASH: the first 16 hex digits of the file's SHA-256) and one `manifest.json` describing
every entry: where it came from (paths relative to the compiled root), its input and output
avals and pytrees, its key, its files and their hashes, and its status (ok, or failed with
the error and its file:line). The manifest holds no timings nor absolute paths: the same
sources give the same bytes in any checkout.

Every run stages and lowers every export; an entry whose key (s2s/build_plan.py: the
StableHLO text, the constants, versions and flags) matches the manifest's, and whose files
still have their recorded hashes, is skipped. Otherwise it is compiled (through the disk
cache), written, then loaded with `s2s_runtime.manifest.load_flat_from` and run once on zeros of
its input avals before it is reported ok: it must return plain NumPy arrays of its output
avals (`--no-verify` skips that run). An exported pmap is compiled as the pmap runs it (its
SPMD module, one replica per device; see `build_plan.stage_target`), on as many CPU devices
as this process gives itself (`_provide_devices`). An entry that a compiled module no longer
exports, or that now fails, has its files removed (each removal is reported); files the
manifest did not list are never touched, except those a compile of one of its entries
wrote and no entry came to list (`_sweep`). A failing function does not stop the others;
the exit status is 1 if any failed.

A build folder never serves an entry that mixes two builds (`s2s_runtime.manifest` checks
every file's hash, and refuses a mixed entry; this module makes sure there is none):

- Files are named by their content, so a compile never overwrites a file an entry of the
  current manifest names (but with the same bytes). Each is written under a temporary name,
  flushed to disk and renamed into place; the manifest that names them is written last, the
  same way, so a compile killed at any point leaves the old manifest with all its files, or
  the new one with all of its.
- One compile at a time writes a folder: from reading the manifest to its last removal, a
  compile holds the folder's lock (`folder_lock`). Two compiles into one `--out` (two
  packages, or one package from two checkouts) import and stage at once, then take turns;
  the second keeps the entries of the first's other modules and replaces those it builds.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import io
import json
import multiprocessing
import os
import re
import sys
import time

import numpy as np

from s2s.build_plan import Target, discover, error_text, plan, sha256, versions
from s2s.errors import CommandLineError
from s2s.export import write_npz
from s2s_runtime import manifest as runtime_manifest
from s2s_runtime.replicated import ReplicatedExecutable, first_devices
from s2s_runtime.xla import Executable, hlo_text, set_num_cpu_devices

MANIFEST = "manifest.json"
MANIFEST_FORMAT = runtime_manifest.MANIFEST_FORMAT
SUFFIXES = {"mlir": ".mlir", "hlo": ".hlo.txt", "exe": ".exe", "consts": ".consts.npz"}   # by kind
OUTPUT_SUFFIXES = tuple(SUFFIXES.values())   # of every file an entry lists


# ---------------------------------------------------------------------------------------
# Compiling one target (in a worker process, or in-process with -j 1)


def compile_target(target: Target) -> dict:
    """Compiles one target into the bytes of its files, by kind; never raises for the
    user's mistakes. Returns its manifest entry (failed, or still to be written), the
    files' contents and its timings. Writes nothing: files are written by the process that
    holds the folder's lock (`install`)."""
    entry = target.entry()
    start = time.perf_counter()
    try:
        replicas = entry.get("replicas")
        if replicas:
            data = ReplicatedExecutable(target.text, entry["in_dtypes"], first_devices(replicas["count"])).serialize()
        else:
            data = Executable(target.text, entry["in_dtypes"]).serialize()
        contents = {"mlir": target.text.encode(), "hlo": hlo_text(target.text, metadata=True).encode(),
                    "exe": data}
        if target.consts:
            buffer = io.BytesIO()
            write_npz(buffer, {f"c{i}": c for i, c in enumerate(target.consts)})
            contents["consts"] = buffer.getvalue()
    except Exception as e:
        entry.update({"status": "failed", "error": error_text(e), "location": None})
        contents = {}
    return {"entry": entry, "contents": contents, "timings": {"compile": time.perf_counter() - start}}


# ---------------------------------------------------------------------------------------
# Writing into the build folder (under its lock)


@contextlib.contextmanager
def folder_lock(out_dir: str):
    """Holds the build folder's lock, saying so when another compile holds it first. The
    lock is on the folder itself (flock of its descriptor), so a compile leaves no lock
    file among the build's files, and no compile can remove the lock another one waits on."""
    descriptor = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"s2s compile: waiting for another s2s compile into {out_dir} to finish",
                  file=sys.stderr, flush=True)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)   # releases the lock


def _write(out_dir: str, name: str, data: bytes | str) -> None:
    """`name` in `out_dir` holding `data`, atomically: written beside it under a temporary
    name (`_sweep` knows these) and flushed to disk, then renamed over it. A reader sees the
    old file or the new one, and so does a compile that follows a crash once `_sync_folder`
    has made the rename durable."""
    tmp = os.path.join(out_dir, f".{name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(out_dir, name))


def _sync_folder(out_dir: str) -> None:
    """Makes the renames in `out_dir` durable: the files before the manifest naming them."""
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return sha256(f.read())
    except OSError:
        return None


def verify(out_dir: str, entry: dict) -> None:
    """Loads `entry` as a user would (`s2s_runtime.manifest.load_flat_from`, a manifest holding
    it alone, not yet written) and runs it on zeros of its inputs; raises unless it returns
    plain NumPy arrays of the entry's output avals."""
    name = entry["name"]
    alone = {"format": MANIFEST_FORMAT, **versions(), "entries": {name: entry}}
    call = runtime_manifest.load_flat_from(alone, os.path.join(out_dir, MANIFEST), name)
    seeds = [np.zeros(2, np.uint64)] * len(entry.get("generators", ()))   # (a fixed seed: nothing drawn from the user's)
    results = call(*[np.zeros(a["shape"], a["dtype"]) for a in entry["inputs"]], generators=seeds or None)
    got = [(type(r).__name__, getattr(r, "dtype", None), getattr(r, "shape", None)) for r in results] \
        if isinstance(results, list) else results
    wanted = [("ndarray", np.dtype(a["dtype"]), tuple(a["shape"])) for a in entry["outputs"]]
    if got != wanted:
        raise RuntimeError(f"the written executable, loaded and run on zeros, returned {got!r} "
                           f"where its manifest entry says {wanted!r}")


def install(out_dir: str, result: dict, check: bool) -> dict:
    """Writes the files of a compiled target (`compile_target`'s result) under names of their
    content and (with `check`) verifies them; returns its manifest entry, ok or failed, with
    the verification's time in the result's timings. The files of an entry that fails here
    are left to `_sweep`."""
    entry = result["entry"]
    if entry.get("status") == "failed":
        return entry
    contents = result["contents"]
    hashes = {kind: sha256(data) for kind, data in contents.items()}
    files = {kind: f"{entry['name']}.{hashes[kind][:16]}{SUFFIXES[kind]}" for kind in contents}
    try:
        for kind, data in contents.items():
            _write(out_dir, files[kind], data)
        entry.update({"status": "ok", "files": files, "verified": check})
        entry.update({f"{kind}_sha256": digest for kind, digest in hashes.items()})
        if check:
            start = time.perf_counter()
            verify(out_dir, entry)
            result["timings"]["verify"] = time.perf_counter() - start
    except Exception as e:
        for field in ["files", "verified"] + [f"{kind}_sha256" for kind in files]:
            entry.pop(field, None)
        entry.update({"status": "failed", "error": error_text(e), "location": None})
    return entry


def up_to_date(entry: dict | None, target: Target, out_dir: str, check: bool) -> bool:
    """Whether `entry` was built from exactly `target` and its files are intact (and
    verified, when verification is asked for)."""
    if not entry or entry.get("status") != "ok" or entry.get("key") != target.key \
            or (check and not entry.get("verified")) or not isinstance(entry.get("files"), dict):
        return False
    files = entry["files"]
    return set(files.values()) == _listed_files(entry) and all(   # plain names of its own kinds
        _file_sha256(os.path.join(out_dir, file)) == entry.get(f"{kind}_sha256") for kind, file in files.items())


# ---------------------------------------------------------------------------------------
# The manifest


def read_manifest(out_dir: str) -> dict:
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT \
            or not isinstance(manifest.get("entries"), dict):
        return {}   # not a manifest this version wrote: everything is recompiled
    return manifest


def _listed_files(entry) -> set[str]:
    """The plain file names an entry lists (no folder, no dot file), of the kinds compile
    writes: a damaged manifest can never name the manifest itself or another file."""
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict):
        return set()
    return {f for f in files.values() if isinstance(f, str) and f and os.path.basename(f) == f
            and not f.startswith(".") and f.endswith(OUTPUT_SUFFIXES)}


def _sweep(out_dir: str, names, kept: set[str]) -> None:
    """Removes the files that compiles of the entries `names` wrote and no entry lists (not
    in `kept`): those of an entry that failed its verification, and those a compile killed
    before its manifest left, finished (NAME.HASH.exe ...) or not (their temporary names,
    and the manifest's)."""
    stems = "|".join(re.escape(name) for name in names if name) or "(?!)"   # (?!): none at all
    generated = rf"(?:{stems})\.[0-9a-f]{{16}}(?:{'|'.join(map(re.escape, OUTPUT_SUFFIXES))})"
    pattern = re.compile(rf"{generated}|\.(?:{generated}|{re.escape(MANIFEST)})\.tmp\d+")
    for file in os.listdir(out_dir):
        path = os.path.join(out_dir, file)
        if file not in kept and pattern.fullmatch(file) and os.path.isfile(path) and not os.path.islink(path):
            os.remove(path)


def merge_into_manifest(out_dir: str, current: dict, compiled_modules: set[str],
                        results: dict) -> dict[str, tuple[str, list]]:
    """Writes this run's entries into the folder's manifest (`current`, as read under the
    lock this run holds), keeping the entries of other modules, and replaces it atomically.

    An old entry of a compiled module (or of a name this run rebuilt, or any entry built by
    another s2s or jaxlib version, which is dropped) gives up the files the new manifest no
    longer lists: they are removed, once the new manifest is in place. Returns, per entry
    name that is gone from the manifest or lost files, its module and the files removed."""
    removed: dict[str, tuple[str, list]] = {}
    same_versions = all(current.get(k) == v for k, v in versions().items())
    entries, replaced = {}, {}
    for name, entry in current.get("entries", {}).items():
        if isinstance(entry, dict) and (entry.get("module") in compiled_modules or name in results
                                        or not same_versions):
            replaced[name] = entry   # (another version's executables do not load here)
        elif isinstance(entry, dict):
            entries[name] = entry
    entries.update(results)
    manifest = {"format": MANIFEST_FORMAT, **versions(), "entries": entries}
    _sync_folder(out_dir)   # every file it names, before the manifest
    _write(out_dir, MANIFEST, json.dumps(manifest, indent=1) + "\n")
    _sync_folder(out_dir)
    kept = set().union(*map(_listed_files, entries.values()))
    for name, entry in replaced.items():
        for file in sorted(_listed_files(entry) - kept):
            path = os.path.join(out_dir, file)
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)
                removed.setdefault(name, (entry.get("module"), []))[1].append(file)
    _sweep(out_dir, set(results) | set(replaced), kept)
    return removed


# ---------------------------------------------------------------------------------------
# The command


def _progress(i: int, total: int, entry: dict, timings: dict | None = None) -> None:
    if entry["status"] != "ok":
        status = f"FAILED {entry.get('location') or ''}".rstrip()
    elif timings is None:
        status = "skipped (up to date)"
    else:
        status = f"ok {timings['compile']:.2f}s"
        if "verify" in timings:
            status += f", verified {timings['verify']:.3f}s"
    print(f"[{i}/{total}] {entry['name']} {status}", file=sys.stderr, flush=True)


def _worker_failure(target: Target, error: BaseException) -> dict:
    """The entry of a target whose worker process died (a crash in XLA, say)."""
    return {"entry": {**target.entry(), "status": "failed", "location": None,
                      "error": f"worker failed: {type(error).__name__}: {error}"}, "timings": {}}


def _compile_all(todo: list[Target], jobs: int):
    """Yields (target, compile_target's result) as each finishes."""
    if jobs > 1 and len(todo) > 1:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(todo)),
                                                    mp_context=context) as pool:
            futures = {pool.submit(compile_target, t): t for t in todo}
            for future in concurrent.futures.as_completed(futures):
                target = futures[future]
                try:
                    yield target, future.result()
                except Exception as e:
                    yield target, _worker_failure(target, e)
    else:
        for target in todo:
            yield target, compile_target(target)


def _provide_devices(count: int) -> None:
    """Makes the CPU client, here and in worker processes, have at least `count` devices,
    so that an exported pmap over `count` devices compiles and verifies. Only possible
    before the client is made; otherwise its entries fail, saying how many they need."""
    count = max(count, int(os.environ.get("S2S_NUM_CPU_DEVICES", "1")))
    if count > 1:
        try:
            set_num_cpu_devices(count)
        except RuntimeError:   # the client exists already: first_devices says what is missing
            return
        os.environ["S2S_NUM_CPU_DEVICES"] = str(count)   # inherited by spawned workers


def compile_paths(paths, out_dir: str, jobs: int = 1, force: bool = False,
                  check: bool = True) -> int:
    modules = discover(paths)
    os.makedirs(out_dir, exist_ok=True)
    targets, failures = plan(modules)
    _provide_devices(max([t.fields["replicas"]["count"] for t in targets if "replicas" in t.fields], default=1))
    compiled = {m.relative for m in modules}
    with folder_lock(out_dir):
        results, skipped, removed = _build(out_dir, compiled, targets, failures, jobs, force, check)
    unimportable = {e["module"] for e in failures if e["function"] is None}
    for name, (module, files) in removed.items():
        why = ("built by another s2s or jaxlib version" if name not in results and module not in compiled
               else "its module failed to import" if name not in results and module in unimportable
               else "no longer exported" if name not in results else "now failed"
               if results[name]["status"] != "ok" else "files no longer needed")
        print(f"s2s compile: removed {', '.join(files)} ({name}: {why})", file=sys.stderr)
    failed = [e for e in results.values() if e["status"] != "ok"]
    for e in failed:
        print(f"s2s compile: {e['name']} failed at {e.get('location') or '<unknown>'}:\n"
              f"{e['error']}", file=sys.stderr)
    print(f"s2s compile: {len(results) - len(failed)} ok ({skipped} skipped), "
          f"{len(failed)} failed; manifest {os.path.join(out_dir, MANIFEST)}", file=sys.stderr)
    return 1 if failed else 0


def _build(out_dir: str, compiled_modules: set[str], targets: list[Target], failures: list[dict],
           jobs: int, force: bool, check: bool):
    """Compiles the targets that are not up to date, writes them and the manifest, under the
    folder's lock. Returns every entry by name, how many were skipped, and what
    `merge_into_manifest` removed."""
    current = read_manifest(out_dir)
    old_entries = current.get("entries", {}) if not force else {}
    total = len(targets) + len(failures)
    done = 0
    results: dict[str, dict] = {}
    for entry in failures:
        done += 1
        results[entry["name"]] = entry
        _progress(done, total, entry)
    todo = []
    for target in targets:
        old = old_entries.get(target.name)
        if up_to_date(old, target, out_dir, check):
            done += 1
            results[target.name] = old
            _progress(done, total, old)
        else:
            todo.append(target)
    for target, result in _compile_all(todo, jobs):
        done += 1
        results[target.name] = install(out_dir, result, check)
        _progress(done, total, results[target.name], result["timings"])
    order = [e["name"] for e in failures] + [t.name for t in targets]
    removed = merge_into_manifest(out_dir, current, compiled_modules, {n: results[n] for n in order})
    return results, len(targets) - len(todo), removed


def cmd_compile(args) -> int:
    if args.jobs < 1:
        raise CommandLineError("s2s compile: -j needs a positive number of workers")
    return compile_paths(args.paths, args.out, args.jobs, args.force, not args.no_verify)
