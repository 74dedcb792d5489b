"""`s2s compile PATH... --out build/ [-j N]`: ahead-of-time compilation of every export.

For each (function, transform) that the modules under PATH declare with `@s2s.export`,
writes into the output folder

    NAME.mlir           the StableHLO text
    NAME.hlo.txt        XLA's (unoptimized) HLO
    NAME.exe            the serialized XLA executable (load with `s2s_runtime.manifest.load`)
    NAME.consts.npz     the constants it closes over, when there are any

and one `manifest.json` describing every entry: where it came from, its input avals and
pytrees, hashes, compile time, and status (ok, or failed with the error and its file:line).

An entry whose inputs are unchanged since the last manifest in the folder (the module's
source sha256, the export declaration, the s2s and jaxlib versions) and whose files are
still there is skipped. Only the module file itself is hashed: a change in a helper module
it imports is not seen (delete the manifest, or touch the module, to force a rebuild).
A failing function does not stop the others; the exit status is 1 if any failed.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import hashlib
import importlib.util
import inspect
import json
import multiprocessing
import os
import sys
import time
import traceback
from importlib import metadata

import numpy as np

import s2s
from s2s import tree as tree_util
from s2s.eager import staged_or_error
from s2s.emit.stablehlo import lower
from s2s.errors import S2SError
from s2s.export import exports_of, write_npz
from s2s.frontend.args import ShapeDtype
from s2s_runtime.xla import Executable, hlo_text

MANIFEST = "manifest.json"
MANIFEST_LOCK = "manifest.json.lock"   # held while the manifest is read, merged and replaced
MANIFEST_FORMAT = 1


# ---------------------------------------------------------------------------------------
# Versions, hashes, discovery


def versions() -> dict:
    return {"s2s_version": s2s.__version__, "jaxlib_version": metadata.version("jaxlib")}


def _sha256(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def discover(paths) -> list[str]:
    """The module files to compile: files as given, folders searched recursively for *.py
    files that mention `s2s.export`. Absolute paths, in a fixed order, without repeats."""
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(os.path.abspath(path))
        elif os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in sorted(files):
                    if not name.endswith(".py"):
                        continue
                    full = os.path.join(root, name)
                    with open(full, encoding="utf-8", errors="replace") as f:
                        if "s2s.export" in f.read():
                            found.append(os.path.abspath(full))
        else:
            raise SystemExit(f"s2s compile: no such file or folder: {path}")
    seen, ordered = set(), []
    for p in found:
        if p not in seen:
            seen.add(p)
            ordered.append(p)
    return ordered


_modules: dict[str, object] = {}


def import_path(path: str):
    """Imports a module file once per process (its folder goes on sys.path). Two files with
    the same name in different folders get distinct module names."""
    path = os.path.abspath(path)
    if path in _modules:
        return _modules[path]
    name = os.path.splitext(os.path.basename(path))[0]
    existing = sys.modules.get(name)
    if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") != path:
        name = f"_s2s_compile_{_sha256(path)[:12]}_{name}"
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _modules[path] = module
    return module


def _describe_leaf(leaf):
    if isinstance(leaf, ShapeDtype):
        return ["aval", list(leaf.shape), leaf.dtype.name]
    if isinstance(leaf, (np.ndarray, np.generic)):
        array = np.ascontiguousarray(leaf)
        return ["array", list(array.shape), array.dtype.name, _sha256(array.tobytes())]
    return ["static", type(leaf).__name__, repr(leaf)]


def export_spec(record, transform: str) -> dict:
    """What of the declaration decides the compiled code, as JSON."""
    leaves, treedef = tree_util.tree_flatten(record.args)
    argnums = record.argnums if isinstance(record.argnums, int) else list(record.argnums)
    return {"function": record.fn.__qualname__, "name": record.name, "transform": transform,
            "args_tree": repr(treedef), "args": [_describe_leaf(l) for l in leaves],
            "argnums": argnums}


# ---------------------------------------------------------------------------------------
# Planning (parent process): which targets, which of them are up to date


@dataclasses.dataclass
class Task:
    name: str               # file stem in the output folder
    stem: str               # the target's own stem (what Export.targets() names it)
    module: str             # absolute path of the module file
    transform: str
    function: str
    key: str                # hash of everything the compiled result depends on
    spec: dict
    source_sha256: str


def _error_location(error: BaseException, module_path: str, fallback: str | None = None) -> str | None:
    """file:line of an error: an s2s error's own location, else the deepest traceback frame
    in the user's module, else `fallback`."""
    where = getattr(error, "where", None)
    if where is not None and getattr(where, "line", 0):
        return f"{where.file}:{where.line}"
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}"
    location = None
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename) == module_path:
            location = f"{frame.filename}:{frame.lineno}"
    return location or fallback


def _function_location(fn) -> str | None:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return None


def _error_text(error: BaseException) -> str:
    if isinstance(error, S2SError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def plan(paths: list[str]) -> tuple[list[Task], list[dict]]:
    """The compile tasks of the module files, and failed entries for modules that do not
    import or whose exports are inconsistent."""
    version = versions()
    tasks, failures = [], []
    for path in paths:
        with open(path, "rb") as f:
            source_sha = _sha256(f.read())
        try:
            records = exports_of(import_path(path))
        except Exception as e:  # the module is the user's: report it, go on with the others
            failures.append({
                "name": f"<module {os.path.basename(path)}>", "module": path, "function": None,
                "transform": None, "status": "failed", "error": _error_text(e),
                "location": _error_location(e, path, f"{path}:1"), "source_sha256": source_sha})
            continue
        for record in records:
            for transform, (stem, _) in zip(record.transforms, record.targets()):
                spec = export_spec(record, transform)
                key = _sha256(json.dumps({"source": source_sha, "spec": spec, **version},
                                         sort_keys=True))
                tasks.append(Task(stem, stem, path, transform, record.fn.__qualname__, key, spec,
                                  source_sha))
    # The same stem from two modules: qualify both with their module's name.
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.stem] = counts.get(t.stem, 0) + 1
    for t in tasks:
        if counts[t.stem] > 1:
            t.name = f"{os.path.splitext(os.path.basename(t.module))[0]}.{t.stem}"
    return tasks, failures


def _up_to_date(entry: dict | None, task: Task, out_dir: str) -> bool:
    if not entry or entry.get("status") != "ok" or entry.get("key") != task.key:
        return False
    return all(os.path.exists(os.path.join(out_dir, f)) for f in entry.get("files", {}).values())


# ---------------------------------------------------------------------------------------
# Compiling one target (in a worker process, or in-process with -j 1)


def _write(path: str, data: bytes | str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def _aval(aval) -> dict:
    return {"shape": list(aval.shape), "dtype": np.dtype(aval.dtype).name}


def compile_task(task: Task, out_dir: str) -> dict:
    """Compiles one target and writes its files; never raises for the user's mistakes."""
    entry = {"name": task.name, "module": task.module, "function": task.function,
             "transform": task.transform, "key": task.key, "spec": task.spec,
             "source_sha256": task.source_sha256}
    start = time.perf_counter()
    fallback = None
    try:
        module = import_path(task.module)
        target = record = None
        for r in exports_of(module):
            for transform, (stem, fn) in zip(r.transforms, r.targets()):
                if stem == task.stem:
                    record, target = r, fn
        if target is None:
            raise LookupError(f"{task.module} no longer exports {task.stem}")
        fallback = _function_location(record.fn)
        staged = staged_or_error(target, record.example_args(task.transform), {})
        text = lower(staged.closed)
        hlo = hlo_text(text)
        jaxpr = staged.closed.jaxpr
        in_dtypes = [np.dtype(v.aval.dtype).name for v in jaxpr.constvars + jaxpr.invars]
        data = Executable(text, in_dtypes).serialize()
        files = {"mlir": f"{task.name}.mlir", "hlo": f"{task.name}.hlo.txt",
                 "exe": f"{task.name}.exe"}
        consts = list(staged.closed.consts)
        if consts:
            files["consts"] = f"{task.name}.consts.npz"
            write_npz(os.path.join(out_dir, files["consts"]),
                      {f"c{i}": np.asarray(c) for i, c in enumerate(consts)})
        _write(os.path.join(out_dir, files["mlir"]), text)
        _write(os.path.join(out_dir, files["hlo"]), hlo)
        _write(os.path.join(out_dir, files["exe"]), data)
        entry.update({
            "status": "ok", "files": files,
            "params": list(staged.param_names),
            "in_tree": repr(staged.in_tree), "staged_mask": list(staged.staged_mask),
            "out_tree": repr(staged.out_tree),
            "inputs": [_aval(v.aval) for v in jaxpr.invars],
            "outputs": [_aval(a) for a in staged.closed.out_avals],
            "in_dtypes": in_dtypes, "num_consts": len(consts),
            "mlir_sha256": _sha256(text), "exe_sha256": _sha256(data),
        })
    except Exception as e:
        entry.update({"status": "failed", "error": _error_text(e),
                      "location": _error_location(e, task.module, fallback)})
    entry["compile_seconds"] = round(time.perf_counter() - start, 4)
    return entry


def _worker_init(sys_path: list[str]) -> None:
    for p in reversed(sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)


# ---------------------------------------------------------------------------------------
# The command


def merge_into_manifest(out_dir: str, compiled_modules: set[str], results: dict) -> None:
    """Writes this run's entries into the folder's manifest, keeping the entries of other
    modules that a concurrent `s2s compile` into the same folder may have written since this
    run began: the manifest is re-read and replaced under an exclusive lock, atomically."""
    with open(os.path.join(out_dir, MANIFEST_LOCK), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            current = read_manifest(out_dir)
            same_versions = all(current.get(k) == v for k, v in versions().items())
            entries = {n: e for n, e in current.get("entries", {}).items()
                       if same_versions and isinstance(e, dict)
                       and e.get("module") not in compiled_modules and n not in results}
            entries.update(results)
            manifest = {"format": MANIFEST_FORMAT, **versions(), "entries": entries}
            _write(os.path.join(out_dir, MANIFEST),
                   json.dumps(manifest, indent=1, sort_keys=False) + "\n")
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


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


def _progress(i: int, total: int, entry: dict, skipped: bool = False) -> None:
    if skipped:
        status = "skipped (up to date)"
    elif entry["status"] == "ok":
        status = f"ok {entry['compile_seconds']:.2f}s"
    else:
        status = f"FAILED {entry.get('location') or ''}".rstrip()
    print(f"[{i}/{total}] {entry['name']} {status}", file=sys.stderr, flush=True)


def compile_paths(paths, out_dir: str, jobs: int = 1, force: bool = False) -> int:
    modules = discover(paths)
    os.makedirs(out_dir, exist_ok=True)
    previous = read_manifest(out_dir)
    old_entries = previous.get("entries", {}) if not force else {}
    tasks, failures = plan(modules)
    total = len(tasks) + len(failures)
    done = 0
    results: dict[str, dict] = {}
    for entry in failures:
        done += 1
        results[entry["name"]] = entry
        _progress(done, total, entry)
    todo = []
    for task in tasks:
        old = old_entries.get(task.name)
        if _up_to_date(old, task, out_dir):
            done += 1
            entry = dict(old, skipped=True)
            results[task.name] = entry
            _progress(done, total, entry, skipped=True)
        else:
            todo.append(task)
    if jobs > 1 and len(todo) > 1:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(jobs, len(todo)), mp_context=context,
                initializer=_worker_init, initargs=(list(sys.path),)) as pool:
            futures = {pool.submit(compile_task, t, out_dir): t for t in todo}
            for future in concurrent.futures.as_completed(futures):
                task = futures[future]
                try:
                    entry = future.result()
                except Exception as e:  # a worker died (a crash in XLA, say)
                    entry = {"name": task.name, "module": task.module, "function": task.function,
                             "transform": task.transform, "key": task.key, "status": "failed",
                             "error": f"worker failed: {type(e).__name__}: {e}",
                             "location": None, "compile_seconds": 0.0}
                done += 1
                results[task.name] = entry
                _progress(done, total, entry)
    else:
        for task in todo:
            entry = compile_task(task, out_dir)
            done += 1
            results[task.name] = entry
            _progress(done, total, entry)
    order = [e["name"] for e in failures] + [t.name for t in tasks]
    merge_into_manifest(out_dir, set(modules), {n: results[n] for n in order})
    failed = [e for e in results.values() if e["status"] != "ok"]
    skipped = sum(1 for e in results.values() if e.get("skipped"))
    for e in failed:
        print(f"s2s compile: {e['name']} failed at {e.get('location') or '<unknown>'}:\n"
              f"{e['error']}", file=sys.stderr)
    print(f"s2s compile: {len(results) - len(failed)} ok ({skipped} skipped), {len(failed)} failed;"
          f" manifest {os.path.join(out_dir, MANIFEST)}", file=sys.stderr)
    return 1 if failed else 0


def cmd_compile(args) -> int:
    if args.jobs < 1:
        raise SystemExit("s2s compile: -j needs a positive number of workers")
    return compile_paths(args.paths, args.out, args.jobs, args.force)
