"""`s2s compile PATH... --out build/ [-j N] [--force] [--no-verify]`: ahead-of-time
compilation of every export.

Each (function, transform) that the modules under PATH declare with `@s2s.export` is an
entry named by its module's dotted name and its stem (`pkg.models.dense.grad_loss`; see
s2s/build_plan.py for how modules are imported and named). Into the output folder go

    NAME.mlir           the StableHLO text (locations relative to the compiled root)
    NAME.hlo.txt        XLA's (unoptimized) HLO, with its source metadata
    NAME.exe            the serialized XLA executable (load with `s2s_runtime.manifest.load`)
    NAME.consts.npz     the constants it closes over, when there are any

and one `manifest.json` describing every entry: where it came from (paths relative to the
compiled root), its input and output avals and pytrees, its key and file hashes, and its
status (ok, or failed with the error and its file:line). The manifest holds no timings nor
absolute paths: the same sources give the same bytes in any checkout.

Every run stages and lowers every export; an entry whose key (s2s/build_plan.py: the
StableHLO text, the constants, versions and flags) matches the manifest's, and whose files
still have their recorded hashes, is skipped. Otherwise it is compiled (through the disk
cache), written, then loaded with `s2s_runtime.manifest.load` and run once on zeros of its
input avals before it is reported ok: it must return plain NumPy arrays of its output avals
(`--no-verify` skips that run). An exported pmap is compiled as the pmap runs it (its SPMD
module, one replica per device; see `build_plan.stage_target`), on as many CPU devices as
this process gives itself (`_provide_devices`). An entry that a compiled module no longer exports, or that
now fails, has its files removed (each removal is reported); files the manifest did not list
are never touched. A failing function does not stop the others; the exit status is 1 if
any failed.
"""
from __future__ import annotations

import concurrent.futures
import fcntl
import json
import multiprocessing
import os
import sys
import time

import numpy as np

from s2s.build_plan import Target, discover, error_text, plan, sha256, versions
from s2s.export import write_npz
from s2s_runtime import manifest as runtime_manifest
from s2s_runtime.replicated import ReplicatedExecutable, replica_devices
from s2s_runtime.xla import Executable, hlo_text, set_num_cpu_devices

MANIFEST = "manifest.json"
MANIFEST_LOCK = "manifest.json.lock"   # held while the manifest is read, merged and replaced
MANIFEST_FORMAT = runtime_manifest.MANIFEST_FORMAT


# ---------------------------------------------------------------------------------------
# Compiling one target (in a worker process, or in-process with -j 1)


def _write(path: str, data: bytes | str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def _file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return sha256(f.read())
    except OSError:
        return None


def verify(out_dir: str, entry: dict) -> None:
    """Loads `entry` as a user would (`s2s_runtime.manifest.load`, from a manifest holding it
    alone) and runs it on zeros of its inputs; raises unless it returns plain NumPy arrays of
    the entry's output avals."""
    name = entry["name"]
    path = os.path.join(out_dir, f".verify-{os.getpid()}-{name}.json")
    _write(path, json.dumps({"format": MANIFEST_FORMAT, **versions(), "entries": {name: entry}}))
    try:
        call = runtime_manifest.load(path, name)
    finally:
        os.remove(path)
    results = call(*[np.zeros(a["shape"], a["dtype"]) for a in entry["inputs"]])
    got = [(type(r).__name__, getattr(r, "dtype", None), getattr(r, "shape", None)) for r in results] \
        if isinstance(results, list) else results
    wanted = [("ndarray", np.dtype(a["dtype"]), tuple(a["shape"])) for a in entry["outputs"]]
    if got != wanted:
        raise RuntimeError(f"the written executable, loaded and run on zeros, returned {got!r} "
                           f"where its manifest entry says {wanted!r}")


def compile_target(target: Target, out_dir: str, check: bool = True) -> dict:
    """Compiles one target, writes its files and (with `check`) verifies them; never raises
    for the user's mistakes. Returns its manifest entry, and its timings apart."""
    entry = target.entry()
    files = {"mlir": f"{target.name}.mlir", "hlo": f"{target.name}.hlo.txt",
             "exe": f"{target.name}.exe"}
    if target.consts:
        files["consts"] = f"{target.name}.consts.npz"
    start = time.perf_counter()
    timings = {}
    try:
        replicas = entry.get("replicas")
        if replicas:
            data = ReplicatedExecutable(target.text, entry["in_dtypes"], replica_devices(replicas["count"])).serialize()
        else:
            data = Executable(target.text, entry["in_dtypes"]).serialize()
        if target.consts:
            write_npz(os.path.join(out_dir, files["consts"]),
                      {f"c{i}": c for i, c in enumerate(target.consts)})
        _write(os.path.join(out_dir, files["mlir"]), target.text)
        _write(os.path.join(out_dir, files["hlo"]), hlo_text(target.text, metadata=True))
        _write(os.path.join(out_dir, files["exe"]), data)
        entry.update({"status": "ok", "files": files, "verified": check})
        entry.update({f"{kind}_sha256": _file_sha256(os.path.join(out_dir, file))
                      for kind, file in files.items()})
        timings["compile"] = time.perf_counter() - start
        if check:
            verify(out_dir, entry)
            timings["verify"] = time.perf_counter() - start - timings["compile"]
    except Exception as e:
        for file in files.values():   # nothing half-written stays behind a failed entry
            if os.path.isfile(os.path.join(out_dir, file)):
                os.remove(os.path.join(out_dir, file))
        for field in ["files", "verified"] + [f"{kind}_sha256" for kind in files]:
            entry.pop(field, None)
        entry.update({"status": "failed", "error": error_text(e), "location": None})
    timings.setdefault("compile", time.perf_counter() - start)
    return {"entry": entry, "timings": timings}


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


OUTPUT_SUFFIXES = (".mlir", ".hlo.txt", ".exe", ".consts.npz")   # what compile_target writes


def _listed_files(entry) -> set[str]:
    """The plain file names an entry lists (no folder, no dot file), of the kinds compile
    writes: a damaged manifest can never name the manifest itself or another file."""
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict):
        return set()
    return {f for f in files.values() if isinstance(f, str) and f and os.path.basename(f) == f
            and not f.startswith(".") and f.endswith(OUTPUT_SUFFIXES)}


def merge_into_manifest(out_dir: str, compiled_modules: set[str],
                        results: dict) -> dict[str, tuple[str, list]]:
    """Writes this run's entries into the folder's manifest, keeping the entries of other
    modules that a concurrent `s2s compile` into the same folder may have written since this
    run began: the manifest is re-read and replaced under an exclusive lock, atomically.

    An old entry of a compiled module (or of a name this run rebuilt, or any entry built by
    another s2s or jaxlib version, which is dropped) gives up the files the new manifest no
    longer lists: they are removed. Returns, per entry name that is gone from
    the manifest or lost files, its module and the files removed."""
    removed: dict[str, tuple[str, list]] = {}
    with open(os.path.join(out_dir, MANIFEST_LOCK), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            current = read_manifest(out_dir)
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
            _write(os.path.join(out_dir, MANIFEST), json.dumps(manifest, indent=1) + "\n")
            kept = set().union(*map(_listed_files, entries.values()))
            for name, entry in replaced.items():
                for file in sorted(_listed_files(entry) - kept):
                    path = os.path.join(out_dir, file)
                    if os.path.isfile(path) and not os.path.islink(path):
                        os.remove(path)
                        removed.setdefault(name, (entry.get("module"), []))[1].append(file)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
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


def _compile_all(todo: list[Target], out_dir: str, jobs: int, check: bool):
    """Yields (target, compile_target's result) as each finishes."""
    if jobs > 1 and len(todo) > 1:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(todo)),
                                                    mp_context=context) as pool:
            futures = {pool.submit(compile_target, t, out_dir, check): t for t in todo}
            for future in concurrent.futures.as_completed(futures):
                target = futures[future]
                try:
                    yield target, future.result()
                except Exception as e:
                    yield target, _worker_failure(target, e)
    else:
        for target in todo:
            yield target, compile_target(target, out_dir, check)


def _provide_devices(count: int) -> None:
    """Makes the CPU client, here and in worker processes, have at least `count` devices,
    so that an exported pmap over `count` devices compiles and verifies. Only possible
    before the client is made; otherwise its entries fail, saying how many they need."""
    count = max(count, int(os.environ.get("S2S_NUM_CPU_DEVICES", "1")))
    if count > 1:
        try:
            set_num_cpu_devices(count)
        except RuntimeError:   # the client exists already: replica_devices says what is missing
            return
        os.environ["S2S_NUM_CPU_DEVICES"] = str(count)   # inherited by spawned workers


def compile_paths(paths, out_dir: str, jobs: int = 1, force: bool = False,
                  check: bool = True) -> int:
    modules = discover(paths)
    os.makedirs(out_dir, exist_ok=True)
    old_entries = read_manifest(out_dir).get("entries", {}) if not force else {}
    targets, failures = plan(modules)
    _provide_devices(max([t.fields["replicas"]["count"] for t in targets if "replicas" in t.fields], default=1))
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
    for target, result in _compile_all(todo, out_dir, jobs, check):
        done += 1
        results[target.name] = result["entry"]
        _progress(done, total, result["entry"], result["timings"])
    order = [e["name"] for e in failures] + [t.name for t in targets]
    removed = merge_into_manifest(out_dir, {m.relative for m in modules}, {n: results[n] for n in order})
    unimportable = {e["module"] for e in failures if e["function"] is None}
    compiled = {m.relative for m in modules}
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
    print(f"s2s compile: {len(results) - len(failed)} ok ({len(targets) - len(todo)} skipped), "
          f"{len(failed)} failed; manifest {os.path.join(out_dir, MANIFEST)}", file=sys.stderr)
    return 1 if failed else 0


def cmd_compile(args) -> int:
    if args.jobs < 1:
        raise SystemExit("s2s compile: -j needs a positive number of workers")
    return compile_paths(args.paths, args.out, args.jobs, args.force, not args.no_verify)
