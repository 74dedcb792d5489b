"""The `s2s` command line: `s2s jaxpr`, `s2s emit`, `s2s check` and `s2s compile`.

    s2s jaxpr path/to/mod.py:fn --args 'f32[128,784], f32[784]'
    s2s jaxpr path/to/mod.py                               # every @s2s.export, as declared
    s2s emit  path/to/mod.py:fn --args 'f32[128,784], f32[784]' --transform grad --out generated/
    s2s emit  path/to/mod.py --out derivatives/            # every @s2s.export; removes orphans
    s2s check path/to/pkg/ other.py:loss --against derivatives/   # exit 1 with a diff if stale
    s2s check path/to/pkg/ --against derivatives/ --html review.html   # and a page to review it
    s2s compile path/to/pkg/ --out build/ -j 4             # .mlir, .hlo.txt, .exe + manifest.json

Every command loads the user's code the way `s2s compile` does (`build_plan.load`): a module
in a package is imported by its dotted name with the package root's parent on sys.path, so
relative imports work without PYTHONPATH, from any working folder.

`--html PAGE.html` (emit and check) also writes the review page of `review_page`: each
source function beside its derivative, every statement linked to its source line, and for
check the changed lines marked with the source lines they changed with; check writes it
also when it exits 1.

Argument specs are `dtype[dims]` (f32, f64, i32, i64, bool, ...), Python numbers for
static arguments, and dicts/lists/tuples of those for pytree arguments. A function given
without --args is staged with the arguments of its @s2s.export. A mistake in the user's
code is printed as a compiler error (file:line:col, the line, a caret) with exit status 1,
as are stale derivatives; a bad command line exits with status 2.
"""
from __future__ import annotations

import argparse
import difflib
import inspect
import os
import sys

import s2s
from s2s.api import make_jaxpr
from s2s.batch_compile import cmd_compile
from s2s.build_plan import discover, load
from s2s.eager import emitted_module
from s2s.emit.python import EmitOptions
from s2s.emit.signature import generated_from, is_generated_source, source_label
from s2s.errors import CommandLineError, S2SError
from s2s.export import NAME_HELP, TRANSFORMS, Export, emit_exports, exports_of, is_valid_name, write_npz
from s2s.frontend.args import parse_arg_specs
from s2s.provenance import changed_source_lines, def_line, shown
from s2s.review_page import GeneratedFile, is_review_page, write_review_page
from s2s.transformed import required_parameters, staged_or_error


def split_target(target: str) -> tuple[str, str | None]:
    """`path/to/mod.py:fn` → (path, 'fn'); a module file or folder alone → (path, None)."""
    path, sep, attr = target.rpartition(":")
    if not sep:
        return target, None
    if not path or not attr:
        raise CommandLineError(f"s2s: expected MODULE.py:FUNCTION or MODULE.py, got {target!r}")
    return path, attr


def load_file(path: str):
    """The module of one file, loaded as every command loads modules (`build_plan.load`)."""
    if not os.path.isfile(path):
        raise CommandLineError(f"s2s: no such file: {path}" if not os.path.exists(path)
                               else f"s2s: {path} is a folder; this command takes one module file")
    [(_, module)] = load([path])
    return module


def attribute(module, path: str, attr: str):
    """`attr` (dotted: `Model.loss`) of the module loaded from `path`."""
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CommandLineError(f"s2s: {path} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _static_argnums(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(",") if p.strip()) if text else ()


def _arg_specs(text: str) -> tuple:
    """The --args option parsed; a spec that does not parse is a bad command line."""
    try:
        return tuple(parse_arg_specs(text))
    except S2SError as error:
        raise CommandLineError(f"s2s: --args {text!r}: {error}") from None


def function_target(command: str, target: str, args) -> tuple[Export, str, object, tuple]:
    """(its Export, name, function to stage, its example arguments) for `jaxpr`/`emit` of one function:
    `--transform` of it (an `Export` of one transform, so the same functions and example
    arguments as `@s2s.export` gives), with the arguments of --args, else those of the
    function's own @s2s.export."""
    path, attr = split_target(target)
    fn = attribute(load_file(path), path, attr)
    declared = getattr(fn, "__s2s_exports__", None)
    if args.args:
        example, argnums = _arg_specs(args.args), 0
    elif declared:
        example, argnums = declared[0].args, declared[0].argnums
    else:
        needed = required_parameters(fn)
        if needed:
            raise CommandLineError(
                f"s2s {command}: {target} takes {', '.join(needed)}, and has no @s2s.export to "
                f"take argument types from: pass them with --args, e.g. --args 'f32[128,784], f32[784]'")
        example, argnums = (), 0
    transform = args.transform or "primal"
    record = Export(fn, example, (transform,), fn.__name__, argnums)
    [(stem, staged_fn)] = record.targets()
    return record, stem, staged_fn, record.example_args(transform)


def module_only(command: str, args) -> None:
    """Refuses the options that choose how to stage one function, given a whole module
    (whose @s2s.export declarations say that)."""
    given = [f"--{name.replace('_', '-')}" for name in ("args", "static_argnums", "transform", "name")
             if getattr(args, name, None) not in (None, "")]
    if given:
        raise CommandLineError(f"s2s {command}: {', '.join(given)} apply to one function "
                               f"(MODULE.py:FUNCTION); a module's @s2s.export declarations say "
                               f"what to stage")


def cmd_jaxpr(args) -> int:
    path, attr = split_target(args.target)
    if attr is None:   # a module: each target of each of its exports
        module_only("jaxpr", args)
        module = load_file(path)
        records = exports_of(module)
        if not records:
            raise CommandLineError(f"s2s jaxpr: {path} declares no @s2s.export: name a function "
                                   f"(MODULE.py:FUNCTION) and its --args")
        for record in records:
            for transform, (stem, fn) in zip(record.transforms, record.targets()):
                print(f"# {stem}: {transform} of {record.fn.__qualname__}")
                print(make_jaxpr(fn)(*record.example_args(transform)))
        return 0
    _, _, fn, example = function_target("jaxpr", args.target, args)
    print(make_jaxpr(fn, static_argnums=_static_argnums(args.static_argnums))(*example))
    return 0


def _refusal(path: str, sources: list[str]) -> str | None:
    """Why the existing file at `path` must not be overwritten, or None if it may be."""
    if os.path.islink(path):
        return "it is a symbolic link"
    if any(os.path.exists(s) and os.path.samefile(path, s) for s in sources):
        return "it is the source file being read"
    if not os.path.isfile(path):
        return "it is not a regular file"
    with open(path, encoding="utf-8", errors="replace") as f:
        if not is_generated_source(f.readline()):
            return "it was not generated by s2s (its first line is not s2s's generated-file header)"
    return None


def _planned_writes(out_dir: str, files: dict, sources: list[str]) -> list[tuple[str, object]]:
    """(path, module) for every module to write, after checking all of them: each file (and
    its sidecar .npz) lies inside `out_dir` and is new or one s2s generated; an existing
    sidecar may be replaced only beside its generated .py."""
    real_out = os.path.realpath(out_dir)
    writes = []
    for filename, module in files.items():
        if not is_valid_name(filename[:-3]):
            raise CommandLineError(f"s2s: refusing to write {filename!r}: {NAME_HELP}")
        path = os.path.join(out_dir, filename)
        sidecar = path[:-3] + ".npz"
        for target in [path] + ([sidecar] if module.sidecar else []):
            if os.path.commonpath([real_out, os.path.realpath(target)]) != real_out:
                raise CommandLineError(f"s2s: refusing to write {target}: it resolves outside {out_dir}")
        reason = _refusal(path, sources) if os.path.lexists(path) else None
        if reason is None and module.sidecar and os.path.lexists(sidecar) and not os.path.lexists(path):
            reason = f"{sidecar} exists without its generated {filename}"
        if reason:
            raise CommandLineError(f"s2s: refusing to overwrite {path}: {reason}. Move it away, "
                                   f"or choose another --out (or another name) for the generated files")
        writes.append((path, module))
    return writes


def _write_files(out_dir: str, files: dict, sources: list[str]) -> None:
    """Writes emitted modules (and their sidecar constants) into `out_dir`; nothing is
    written unless every file may be (see `_planned_writes`), and never `sources`."""
    os.makedirs(out_dir, exist_ok=True)
    for path, module in _planned_writes(out_dir, files, sources):
        with open(path, "w", newline="\n", encoding="utf-8") as f:
            f.write(module.source)
        if module.sidecar:
            write_npz(path[:-3] + ".npz", module.sidecar)
        print(path)


def orphans(folder: str, module_path: str, files: dict) -> list[str]:
    """The generated files in `folder` that came from the module at `module_path` (their
    header says so, and names the file's own function) but that are not among `files`, what
    its exports produce now: left behind by a renamed or removed export. Files generated
    from other modules that share the folder, and files s2s did not write, are not."""
    if not os.path.isdir(folder):
        return []
    label = source_label(module_path)
    found = []
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if not entry.endswith(".py") or entry in files or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            origin = generated_from(f.readline())
        if origin == (entry[:-3], label):
            found.append(path)
    return found


def _remove_orphans(folder: str, module_path: str, files: dict) -> None:
    """Deletes (and prints) the module's orphans in `folder`, with their sidecar .npz."""
    for path in orphans(folder, module_path, files):
        sidecar = path[:-3] + ".npz"
        for target in [path] + ([sidecar] if os.path.isfile(sidecar) and not os.path.islink(sidecar) else []):
            os.remove(target)
            print(f"removed {target}")


def cmd_emit(args) -> int:
    path, attr = split_target(args.target)
    refuse_review_page(args.html)
    if attr is None:   # a module: everything it declares with @s2s.export
        module_only("emit", args)
        if args.out is None:
            raise CommandLineError("s2s emit: emitting a module's exports needs --out DIR")
        module = load_file(path)
        files = emit_exports(module, not args.no_comments)
        _write_files(args.out, files, [path])
        _remove_orphans(args.out, path, files)
        made_by = _made_by(exports_of(module))
        write_review(args.html, f"s2s emit {shown(path)}", [
            GeneratedFile(os.path.join(args.out, filename), path, "written", emitted.source,
                          definition=_export_line(made_by[filename])) for filename, emitted in files.items()])
        return 0
    record, stem, fn, example = function_target("emit", args.target, args)
    name = stem if args.name is None else args.name
    if not is_valid_name(name):
        raise CommandLineError(f"s2s emit: {name!r} cannot name the emitted function and its "
                               f"file: pass --name: {NAME_HELP}")
    staged = staged_or_error(fn, example, {}, _static_argnums(args.static_argnums))
    options = EmitOptions(source_comments=not args.no_comments, const_mode="sidecar",
                          sidecar_name=f"{name}.npz")
    module = emitted_module(staged, name, options)
    definition = _export_line(record) if inspect.isfunction(inspect.unwrap(record.fn)) else None
    page = [GeneratedFile(os.path.join(args.out or "", f"{name}.py"), path, "written", module.source,
                          definition=definition)]
    if args.out is None:
        sys.stdout.write(module.source)
        if module.sidecar:
            print("s2s: large constants need --out DIR to be written", file=sys.stderr)
            return 2
    else:
        _write_files(args.out, {f"{name}.py": module}, [path])
    write_review(args.html, f"s2s emit {shown(path)}:{attr}", page)
    return 0


def refuse_review_page(html_path: str | None) -> None:
    """Refuses --html PATH before any work when PATH holds something other than a review
    page s2s wrote (a source file, a page of the team's, a link): it is written over."""
    if html_path is None or not os.path.lexists(html_path):
        return
    if os.path.islink(html_path) or not os.path.isfile(html_path) or not is_review_page(html_path):
        raise CommandLineError(f"s2s: refusing to overwrite {html_path}: it is not a review page s2s "
                               f"wrote. Move it away, or choose another --html path")


def write_review(html_path: str | None, title: str, files: list[GeneratedFile]) -> None:
    """Writes the review page of this run's files when --html asked for one, and says where
    on stderr (stdout stays what it was: the emitted module, the diff, the annotations)."""
    if html_path is None:
        return
    folder = os.path.dirname(html_path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    write_review_page(html_path, title, files)
    print(f"s2s: review page {html_path}", file=sys.stderr)


# ---------------------------------------------------------------------------------------
# s2s check


def check_selection(targets: list[str]) -> dict[str, set[str] | None]:
    """Module file (absolute) → the functions of it to check (None: all its exports), for
    targets that are module files, folders (their modules that use @s2s.export) or
    MODULE.py:FUNCTION."""
    selection: dict[str, set[str] | None] = {}
    for target in targets:
        path, attr = split_target(target)
        if attr is not None and not os.path.isfile(path):
            raise CommandLineError(f"s2s: no such file: {path}")
        modules = discover([path])
        if not modules:
            raise CommandLineError(f"s2s check: no module under {path} uses @s2s.export, so there "
                                   f"is nothing to check")
        for module in modules:
            if attr is None or selection.get(module.path, set()) is None:
                selection[module.path] = None
            else:
                selection.setdefault(module.path, set()).add(attr)
    return selection


def _escaped(text: str, property_value: bool = False) -> str:
    """Text as a GitHub Actions workflow command carries it (its `%`, newlines, and in a
    property `:` and `,`, percent-encoded)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def annotation(where: tuple[str, int] | str, message: str) -> str:
    """A GitHub Actions error annotation at (file, line), or on a whole file."""
    path, line = where if isinstance(where, tuple) else (where, None)
    place = f"file={_escaped(shown(path), True)}" + (f",line={line}" if line else "")
    return f"::error {place},title=s2s check::{_escaped(message)}\n"


def _export_line(record: Export) -> tuple[str, int]:
    """Where the exported function's `def` is: the place of a change no comment locates."""
    fn = inspect.unwrap(record.fn)
    path = inspect.getsourcefile(fn)
    return path, def_line(path, fn.__qualname__) or inspect.getsourcelines(fn)[1]


def _made_by(records: list[Export]) -> dict[str, Export]:
    """Generated file name → the export that writes it."""
    return {f"{stem}.py": record for record in records for stem, _ in record.targets()}


def check_module(module_path: str, module, functions: set[str] | None, against: str,
                 comments: bool, github: bool) -> list[GeneratedFile]:
    """Checks one module's generated files in `against` (all of them, or those of the
    exports of `functions`); prints each problem. Returns every file expected, and each
    orphan, in the state it found it."""
    records = exports_of(module)
    if functions is not None:
        for name in sorted(functions):
            if not any(r.fn.__qualname__ == name or r.name == name for r in records):
                raise CommandLineError(f"s2s check: {shown(module_path)}:{name} is not an @s2s.export "
                                       f"of that module, so it has no generated files to check")
        records = [r for r in records if r.fn.__qualname__ in functions or r.name in functions]
    files = emit_exports(module, comments, records)
    made_by = _made_by(records)
    fix = f"run `s2s emit {shown(module_path)} --out {against}`"

    def annotate(where, message: str) -> None:
        if github:
            sys.stdout.write(annotation(where, message))

    found = []
    if functions is None:   # orphans belong to the module as a whole
        for path in orphans(against, module_path, files):
            annotate(path, f"orphan: generated from {shown(module_path)} by an export that no longer exists; {fix}")
            print(f"s2s check: orphan {path}: generated from {shown(module_path)} by an export that "
                  f"no longer exists (delete it, or {fix})")
            found.append(GeneratedFile(path, module_path, "orphan"))
    for filename, emitted in files.items():
        path = os.path.join(against, filename)
        definition = _export_line(made_by[filename])
        if not os.path.exists(path):
            annotate(definition, f"{path} is missing; {fix}")
            print(f"s2s check: missing {path} ({fix})")
            found.append(GeneratedFile(path, module_path, "missing", emitted.source, definition=definition))
            continue
        try:
            with open(path, encoding="utf-8") as f:   # as `s2s emit` writes it
                committed = f.read()
        except (OSError, UnicodeDecodeError) as error:   # so not what s2s wrote: stale
            annotate(path, f"cannot be read as UTF-8; {fix}")
            print(f"s2s check: cannot read {path} as the UTF-8 text s2s writes ({error}); {fix}")
            found.append(GeneratedFile(path, module_path, "unreadable", emitted.source, definition=definition))
            continue
        if committed == emitted.source:
            found.append(GeneratedFile(path, module_path, "up to date", emitted.source, definition=definition))
            continue
        if github:
            for where in changed_source_lines(committed, emitted.source, module_path, definition):
                annotate(where, f"the derivative in {path} changed with this line and is stale; "
                                f"{fix}, review and commit it")
        sys.stdout.writelines(difflib.unified_diff(
            committed.splitlines(True), emitted.source.splitlines(True),
            fromfile=f"{path} (committed)", tofile=f"{path} (regenerated)"))
        found.append(GeneratedFile(path, module_path, "stale", emitted.source, committed, definition))
    return found


def cmd_check(args) -> int:
    """Regenerates the exports of the given modules in memory; exit 1 with a diff if any
    file is stale or missing, naming each orphan (a generated file of a module that no
    export of it produces)."""
    selection = check_selection(args.targets)
    refuse_review_page(args.html)
    loaded = {entry.path: module for entry, module in load(list(selection))}
    problems = expected = 0
    stale_modules = []
    reviewed = []
    for path, functions in selection.items():
        found = check_module(path, loaded[path], functions, args.against,
                             not args.no_comments, args.format == "github")
        reviewed += found
        bad = sum(generated.status != "up to date" for generated in found)
        problems, expected = problems + bad, expected + sum(generated.status != "orphan" for generated in found)
        if bad:
            stale_modules.append(shown(path))
    verdict = (f"{problems} generated files stale, missing or orphaned ({expected} expected)" if problems
               else f"{expected} generated files up to date")
    write_review(args.html, f"s2s check --against {args.against}: {verdict}", reviewed)
    if problems:
        fixes = "; ".join(f"`s2s emit {module} --out {args.against}`" for module in stale_modules)
        print(f"s2s check: {problems} generated files are stale, missing or orphaned ({expected} expected); "
              f"regenerate with {fixes}")
        return 1
    print(f"s2s check: {expected} generated files are up to date")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="s2s", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"s2s {s2s.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help in [("jaxpr", "print the jaxpr a function stages into, or those of every "
                                 "@s2s.export of a module"),
                       ("emit", "write readable Python for a function, or for every "
                                "@s2s.export of a module")]:
        p = sub.add_parser(name, help=help)
        p.add_argument("target", help="path/to/module.py:function, or path/to/module.py "
                                      "(its @s2s.export declarations)")
        p.add_argument("--args", default="", help="argument specs, e.g. 'f32[128,784], f32[784]' "
                                                  "(default: those of the function's @s2s.export)")
        p.add_argument("--static-argnums", default=None, help="comma-separated argument indices")
        p.add_argument("--transform", choices=TRANSFORMS, default=None,
                       help="what of the function to stage, as @s2s.export names it (default: "
                            "primal, the function itself)")
        if name == "emit":
            p.add_argument("--out", default=None, help="directory to write NAME.py (and NAME.npz)")
            p.add_argument("--name", default=None, help="name of the emitted function and its file")
            p.add_argument("--no-comments", action="store_true",
                           help="omit the `# file function+N` location comments")
            p.add_argument("--html", default=None, metavar="PAGE.html",
                           help="also write a self-contained page showing each source function "
                                "beside its derivative, each statement linked to its source line")
    p = sub.add_parser("check", help="fail with a diff when generated derivatives are stale")
    p.add_argument("targets", nargs="+", metavar="target",
                   help="path/to/module.py, a folder (its modules that use @s2s.export), or "
                        "path/to/module.py:function (that function's exports)")
    p.add_argument("--against", required=True, help="directory of committed generated files")
    p.add_argument("--format", choices=("text", "github"), default="text",
                   help="github: also an error annotation at each source line whose "
                        "derivative changed, for GitHub Actions")
    p.add_argument("--no-comments", action="store_true",
                   help="the files were emitted with --no-comments")
    p.add_argument("--html", default=None, metavar="PAGE.html",
                   help="also write a self-contained page (also when check fails) showing each "
                        "source function beside its derivative, the changed lines marked with "
                        "the source lines they changed with")
    p = sub.add_parser("compile", help="compile every @s2s.export of modules or package folders "
                                        "to StableHLO, HLO and XLA executables, with a manifest")
    p.add_argument("paths", nargs="+", help="module files, or folders searched for them")
    p.add_argument("--out", required=True, help="directory for NAME.HASH.mlir/.hlo.txt/.exe and manifest.json")
    p.add_argument("-j", "--jobs", type=int, default=1, help="parallel worker processes")
    p.add_argument("--force", action="store_true", help="recompile entries that are up to date")
    p.add_argument("--no-verify", action="store_true",
                   help="skip loading and running each written executable once on zeros")
    args = parser.parse_args(argv)
    try:
        return {"jaxpr": cmd_jaxpr, "emit": cmd_emit, "check": cmd_check,
                "compile": cmd_compile}[args.command](args)
    except S2SError as e:
        print(str(e), file=sys.stderr)
        return 1
    except CommandLineError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
