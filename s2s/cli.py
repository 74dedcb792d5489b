"""The `s2s` command line: `s2s jaxpr`, `s2s emit`, `s2s check` and `s2s compile`.

    s2s jaxpr path/to/mod.py:fn --args 'f32[128,784], f32[784]'
    s2s emit  path/to/mod.py:fn --args 'f32[128,784], f32[784]' --out generated/
    s2s emit  path/to/mod.py --out derivatives/            # every @s2s.export of the module
    s2s check path/to/mod.py --against derivatives/        # exit 1 with a diff if stale
    s2s compile path/to/pkg/ --out build/ -j 4             # .mlir, .hlo.txt, .exe + manifest.json

Argument specs are `dtype[dims]` (f32, f64, i32, i64, bool, ...), Python numbers for
static arguments, and dicts/lists/tuples of those for pytree arguments. A mistake in the
user's code is printed as a compiler error (file:line:col, the line, a caret) with exit
status 1; a bad command line exits with status 2.
"""
from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import sys

from s2s.api import make_jaxpr
from s2s.batch_compile import cmd_compile
from s2s.eager import emitted_module, staged_or_error
from s2s.emit.python import EmitOptions
from s2s.errors import S2SError
from s2s.export import emit_exports, write_npz
from s2s.frontend.args import parse_arg_specs


def load_module(path: str):
    """Imports a module from its file path (its folder goes on sys.path for its imports)."""
    if not os.path.exists(path):
        raise SystemExit(f"s2s: no such file: {path}")
    module_name = os.path.splitext(os.path.basename(path))[0]
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_target(target: str):
    """`path/to/mod.py:fn` → the function object (the module is imported from its path)."""
    path, sep, attr = target.rpartition(":")
    if not sep or not path or not attr:
        raise SystemExit(f"s2s: expected MODULE.py:FUNCTION, got {target!r}")
    module = load_module(path)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"s2s: {path} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _static_argnums(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(",") if p.strip()) if text else ()


def cmd_jaxpr(args) -> int:
    fn = load_target(args.target)
    example = parse_arg_specs(args.args or "")
    print(make_jaxpr(fn, static_argnums=_static_argnums(args.static_argnums))(*example))
    return 0


def _write_files(out_dir: str, files: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    for filename, module in files.items():
        with open(os.path.join(out_dir, filename), "w", newline="\n") as f:
            f.write(module.source)
        if module.sidecar:
            write_npz(os.path.join(out_dir, filename[:-3] + ".npz"), module.sidecar)
        print(os.path.join(out_dir, filename))


def cmd_emit(args) -> int:
    if ":" not in args.target:   # a module: everything it declares with @s2s.export
        if args.out is None:
            raise SystemExit("s2s: emitting a module's exports needs --out DIR")
        _write_files(args.out, emit_exports(load_module(args.target), not args.no_comments))
        return 0
    fn = load_target(args.target)
    example = parse_arg_specs(args.args or "")
    staged = staged_or_error(fn, example, {}, _static_argnums(args.static_argnums))
    name = args.name or fn.__name__
    options = EmitOptions(source_comments=not args.no_comments, const_mode="sidecar",
                          sidecar_name=f"{name}.npz")
    module = emitted_module(staged, name, options)
    if args.out is None:
        sys.stdout.write(module.source)
        if module.sidecar:
            print("s2s: large constants need --out DIR to be written", file=sys.stderr)
            return 2
        return 0
    _write_files(args.out, {f"{name}.py": module})
    return 0


def cmd_check(args) -> int:
    """Regenerates a module's exports in memory; non-zero with a diff if any file is stale."""
    files = emit_exports(load_module(args.target), not args.no_comments)
    problems = 0
    for filename, module in files.items():
        path = os.path.join(args.against, filename)
        if not os.path.exists(path):
            print(f"s2s check: missing {path} (run `s2s emit {args.target} --out {args.against}`)")
            problems += 1
            continue
        with open(path) as f:
            committed = f.read()
        if committed != module.source:
            problems += 1
            sys.stdout.writelines(difflib.unified_diff(
                committed.splitlines(True), module.source.splitlines(True),
                fromfile=f"{path} (committed)", tofile=f"{path} (regenerated)"))
    if problems:
        print(f"s2s check: {problems} of {len(files)} generated files are stale or missing; "
              f"regenerate with `s2s emit {args.target} --out {args.against}`")
        return 1
    print(f"s2s check: {len(files)} generated files are up to date")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="s2s", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help in [("jaxpr", "print the jaxpr a function stages into"),
                       ("emit", "write readable Python for a function, or for every "
                                "@s2s.export of a module"),
                       ("check", "fail with a diff when a module's generated files are stale")]:
        p = sub.add_parser(name, help=help)
        p.add_argument("target", help="path/to/module.py:function, or path/to/module.py "
                                      "(its @s2s.export declarations)")
        if name != "check":
            p.add_argument("--args", default="", help="argument specs, e.g. 'f32[128,784], f32[784]'")
            p.add_argument("--static-argnums", default=None, help="comma-separated argument indices")
        if name == "emit":
            p.add_argument("--out", default=None, help="directory to write NAME.py (and NAME.npz)")
            p.add_argument("--name", default=None, help="name of the emitted function")
        if name == "check":
            p.add_argument("--against", required=True, help="directory of committed generated files")
        if name != "jaxpr":
            p.add_argument("--no-comments", action="store_true", help="omit # file:line comments")
    p = sub.add_parser("compile", help="compile every @s2s.export of modules or package folders "
                                        "to StableHLO, HLO and XLA executables, with a manifest")
    p.add_argument("paths", nargs="+", help="module files, or folders searched for them")
    p.add_argument("--out", required=True, help="directory for NAME.mlir/.hlo.txt/.exe and manifest.json")
    p.add_argument("-j", "--jobs", type=int, default=1, help="parallel worker processes")
    p.add_argument("--force", action="store_true", help="recompile entries that are up to date")
    args = parser.parse_args(argv)
    try:
        return {"jaxpr": cmd_jaxpr, "emit": cmd_emit, "check": cmd_check,
                "compile": cmd_compile}[args.command](args)
    except S2SError as e:
        print(str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
