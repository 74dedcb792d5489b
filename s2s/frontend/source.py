"""Finding a function's AST and classifying its names.

The file a function lives in is parsed once with `ast` (so line and column numbers are the
file's own, and lambdas in the middle of a line are found exactly), and staging walks
that `ast` tree. A function's local names follow Python's rule (`scope_of`, one pass).
beniget's def-use chains, which say what a loop or branch passes on, are made only when
control flow first asks for them, and only for the top-level statement that holds the
function (on a gast copy of it, beniget's input, whose nodes are matched to the `ast`
ones by position): straight-line code never pays for them, and in a big module staging
one function costs that function, not the file. Free names are then resolved through the
function object itself — its closure cells, its `__globals__`, the builtins — never by
guessing from the text.

The text must be the code that runs. Python runs a function's bytecode; s2s reads its
file, which may have been edited since the module was imported (with or without
`importlib.reload`, in a notebook, ...). So before a function's source is used, the file's
current text is compiled and the function's code object must be found in it, equal in
instructions, constants and names (`_same_code`); otherwise staging stops with a
`StaleSourceError` instead of differentiating text that does not run. Sources are cached
by the identity of the code object (two files can hold equal code objects), for as long
as that code object lives, so a reloaded module's functions never see an old text.
"""
from __future__ import annotations

import ast
import bisect
import builtins
import contextlib
import dataclasses
import linecache
import os
import struct
import threading
import types
import weakref

import beniget
import gast   # beniget's input: the def-use chains are made on a gast copy

from s2s.errors import StagingError, StaleSourceError, UnsupportedSyntaxError
from s2s.frontend.scopes import SCOPES, arguments_of, scope_of
from s2s.source_info import ERRSTATE_KINDS, SourceInfo, source_info


@dataclasses.dataclass
class ParsedFile:
    text: str
    module: ast.Module
    lines: list[str]
    # (co_qualname, co_firstlineno) -> the code objects `text` compiles to; built on demand.
    compiled: dict | None = dataclasses.field(default=None, repr=False)
    # index in module.body -> that top-level statement's Statement; made on demand, and
    # kept for as long as a function's source made from it is.
    statements: "weakref.WeakValueDictionary[int, Statement]" = dataclasses.field(
        default_factory=weakref.WeakValueDictionary, repr=False)
    imports: list | None = dataclasses.field(default=None, repr=False)   # see _module_imports


# filename -> the parse of its latest text, for as long as a Statement made from it (and so
# the source of a function staged from it) is alive: each holds its file. A file edited and
# read again replaces its entry; the parse of a module that was dropped (its functions
# gone), or of a notebook cell's text, is freed with the last of them.
_parsed_files: "weakref.WeakValueDictionary[str, ParsedFile]" = weakref.WeakValueDictionary()


class _QuietDefUseChains(beniget.DefUseChains):
    """beniget prints its warnings (unbound names ...) to stdout; staging reports its own."""

    def warn(self, msg, node):
        pass


class Statement:
    """One top-level statement of a file (`ast`), with beniget's def-use chains for it,
    made when first asked for (straight-line code never asks)."""

    def __init__(self, tree: ast.stmt, filename: str, imports: list, has_walrus: bool = True,
                 file: ParsedFile | None = None):
        self.tree = tree
        self.filename = filename
        self.file = file   # the parse this statement is from, kept alive with it
        self.imports = imports   # the file's module-level imports (see `compiled_functions`)
        self.has_walrus = has_walrus   # whether its text has a `:=` (see `scope_of`)
        self._users = None
        self._compiled = None

    def compiled_functions(self) -> dict:
        """As `_compiled_functions`, for the functions of this statement alone. A
        function's code depends on its own and enclosing scopes, on the file's `from
        __future__` imports (how annotations compile), and on which global names an import
        binds (CPython 3.11 compiles `np.sum(x)` without LOAD_METHOD when `np` is an
        imported module): compiled after the file's module-level imports, it is the code
        the whole file gives it."""
        if self._compiled is None:
            self._compiled = _functions_compiled_from(
                ast.Module(body=[*self.imports, self.tree], type_ignores=[]), self.filename)
        return self._compiled

    def users(self, store: ast.Name) -> list | None:
        """The nodes of this statement that may read the value `store` (a Name assigned
        to) binds, by beniget's def-use chains; None when the chains do not know it."""
        users = self._users
        if users is None:   # (two threads may both make them: either is right)
            users = self._users = self._chained_users()
        return users.get(_position_key(store))

    def _chained_users(self) -> dict:
        """position key of each stored Name -> the `ast` nodes reading its value (a read
        that cannot be placed is `_UNPLACED`, which no region holds: counted as outside)."""
        copy = gast.ast_to_gast(self.tree)
        chains = _QuietDefUseChains(self.filename)
        chains.visit(gast.Module(body=[copy], type_ignores=[]))
        originals = {key: n for n in ast.walk(self.tree) if (key := _position_key(n)) is not None}
        users = {}
        for node, chain in chains.chains.items():
            if type(node).__name__ == "Name" and hasattr(node, "lineno"):
                users[_position_key(node)] = [originals.get(_position_key(u.node), _UNPLACED)
                                              for u in chain.users()]
        return users


_UNPLACED = object()


def _position_key(node) -> tuple | None:
    """What tells a node of a statement from its other nodes, in `ast` and in gast alike:
    its class and span; a comprehension (`for t in xs`, which has no position of its own,
    and which beniget names as a reader of `xs`) by its iterable's."""
    if type(node).__name__ == "comprehension":
        return ("comprehension", _position_key(node.iter))
    if not hasattr(node, "lineno"):
        return None
    return (type(node).__name__, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _parse_file(filename: str, lines: list[str]) -> ParsedFile:
    text = "".join(lines)
    parsed = _parsed_files.get(filename)
    if parsed is None or parsed.text != text:
        parsed = _parsed_files[filename] = ParsedFile(text, ast.parse(text, filename), lines)
    return parsed


def _module_imports(parsed: ParsedFile) -> list:
    """The import statements of the file's module scope (inside a top-level `if` or `try`
    too), `from __future__` ones first: found once per file."""
    if parsed.imports is None:
        found, stack = [], list(reversed(parsed.module.body))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif not isinstance(node, SCOPES):   # a block of module scope: if, try, with ...
                stack.extend(reversed([c for c in ast.iter_child_nodes(node) if isinstance(
                    c, (ast.stmt, ast.excepthandler, ast.match_case))]))
        parsed.imports = sorted(found, key=lambda n: not (isinstance(n, ast.ImportFrom)
                                                          and n.module == "__future__"))
    return parsed.imports


def _statement_at(parsed: ParsedFile, filename: str, code) -> Statement | None:
    """The top-level statement of `parsed` that holds the def or lambda `code` was compiled
    from: whose lines (decorators included) hold its first line, and, where several share
    that line (`f = lambda x: ...; g = lambda x: ...`), whose columns hold its code's."""
    line = code.co_firstlineno
    body = parsed.module.body
    starts = [min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", ())]) for s in body]
    index = bisect.bisect_right(starts, line) - 1
    if index < 0 or line > body[index].end_lineno:
        return None
    if index > 0 and body[index - 1].end_lineno == line:   # statements side by side on the line
        columns = [p[2] for p in code.co_positions()   # (not RESUME's empty span at column 0)
                   if p[0] == line and p[2] is not None and p[3] is not None and p[3] > p[2]]
        while index > 0 and columns and body[index].lineno == line and body[index].col_offset > min(columns):
            index -= 1
    statement = parsed.statements.get(index)
    if statement is None:
        tree = body[index]
        has_walrus = any(":=" in text for text in parsed.lines[tree.lineno - 1:tree.end_lineno])
        statement = parsed.statements.setdefault(index, Statement(tree, filename, _module_imports(parsed), has_walrus,
                                                                          file=parsed))
    return statement


def _compiled_functions(parsed: ParsedFile, filename: str) -> dict:
    """(qualified name, first line) -> the code objects of every function the text of
    `parsed` defines, at any depth, as Python compiles them."""
    if parsed.compiled is None:
        parsed.compiled = _functions_compiled_from(parsed.module, filename)
    return parsed.compiled


def _functions_compiled_from(module: ast.Module, filename: str) -> dict:
    """(qualified name, first line) -> the code objects of every function `module` defines,
    at any depth, as Python compiles them (empty when it does not compile)."""
    index: dict = {}
    try:
        stack = [compile(module, filename, "exec", dont_inherit=True)]
    except (SyntaxError, ValueError):
        stack = []
    while stack:
        for const in stack.pop().co_consts:
            if isinstance(const, types.CodeType):
                index.setdefault((const.co_qualname, const.co_firstlineno), []).append(const)
                stack.append(const)
    return index


def _rewritten_by_pytest(code: types.CodeType) -> bool:
    """Whether pytest's assertion rewriting made `code` (its names start with `@py`):
    its asserts compile to other bytecode than the file's text does."""
    return any(n.startswith("@py") for n in code.co_varnames + code.co_names)


def _same_code(running: types.CodeType, compiled: types.CodeType) -> bool:
    """Whether the code Python runs is what the file's text compiles to: the same
    instructions, constants (nested functions compared the same way) and names. Line
    numbers are not compared: a function that only moved in its file is the same code.
    Code rewritten by pytest's assertion hook (test files) is compared more loosely: the
    names of the text must all be among its names, and nested code compares the same way."""
    loose = _rewritten_by_pytest(running)
    if loose:   # the rewriting only adds names (its helpers, `AssertionError`, `@py_...`)
        if not (set(compiled.co_names) <= set(running.co_names)
                and set(compiled.co_varnames) <= set(running.co_varnames)):
            return False
    elif (running.co_code, running.co_names, running.co_varnames, running.co_freevars,
          running.co_cellvars) != (compiled.co_code, compiled.co_names, compiled.co_varnames,
                                   compiled.co_freevars, compiled.co_cellvars):
        return False
    nested = [c for c in running.co_consts if isinstance(c, types.CodeType)]
    nested_compiled = [c for c in compiled.co_consts if isinstance(c, types.CodeType)]
    if len(nested) != len(nested_compiled) or not all(map(_same_code, nested, nested_compiled)):
        return False
    if loose:
        return True
    values = [_constant_key(c) for c in running.co_consts if not isinstance(c, types.CodeType)]
    return values == [_constant_key(c) for c in compiled.co_consts if not isinstance(c, types.CodeType)]


def _constant_key(constant):
    """A code constant as a value equal to another's exactly when the constants are the
    same: type and value, floats by their bits (-0.0 is not 0.0, nan is nan, 1 is not 1.0
    nor True), tuples, frozensets and slices element by element. (marshal's bytes are not
    such a key: its newer formats write a tuple differently when something else refers to
    it, and its older ones cannot write a slice, which Python 3.14 keeps as a constant.)"""
    kind = type(constant)
    if kind is tuple:
        return kind, tuple(map(_constant_key, constant))
    if kind is frozenset:
        return kind, frozenset(map(_constant_key, constant))
    if kind is slice:
        return kind, _constant_key(constant.start), _constant_key(constant.stop), _constant_key(constant.step)
    if kind is float:
        return kind, struct.pack("<d", constant)
    if kind is complex:
        return kind, struct.pack("<dd", constant.real, constant.imag)
    return kind, constant


def _stale_source_error(fn, filename: str) -> StaleSourceError:
    code = fn.__code__
    name = code.co_qualname
    return StaleSourceError(
        f"{os.path.basename(filename)} changed since `{name}` was defined: its text is not the "
        f"code Python runs for `{name}`, and s2s will not differentiate code that does not run",
        "reload the module (importlib.reload) or restart the process, so that the function "
        "and its file agree; in a notebook, run the cell that defines it again",
        SourceInfo(filename, code.co_firstlineno, 1, name))


@dataclasses.dataclass
class FunctionSource:
    """A function's AST node, the file it is in, and the names its body binds."""
    node: ast.FunctionDef | ast.Lambda
    filename: str
    name: str
    local_names: frozenset[str]   # names bound in the function's own scope (args included)
    declarations: tuple   # its own `global` and `nonlocal` statements
    statement: Statement | None = dataclasses.field(default=None, repr=False)   # where `node` is
    # The def that locations are counted from (SourceInfo.function, .def_line): the
    # function itself, or for a lambda nested in a staged function, that function.
    anchor_name: str = ""
    anchor_line: int = 0
    _infos: dict = dataclasses.field(default_factory=dict, repr=False)
    nested: dict = dataclasses.field(default_factory=dict, repr=False)   # AST node -> FunctionSource

    def stored_names(self, statements) -> list[str]:
        """Names the statements assign (in order of first assignment), not looking into
        nested functions nor at comprehensions' targets, which have scopes of their own."""
        nodes = list(walk_scope(statements))
        own = {id(n) for c in nodes if isinstance(c, ast.comprehension) for n in ast.walk(c.target)}
        names: list[str] = []
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names \
                    and id(node) not in own:
                names.append(node.id)
        return names

    def used_outside(self, region, names) -> list[str]:
        """Of `names`, those whose assignments inside the AST node `region` are read by code
        outside it, or inside it before the assignment (a loop's next iteration), by the
        def-use chains: the values a block of code passes on."""
        statement_of = _innermost_statements(region)
        reset_before = _resets_before(region)
        passed_on = []
        for node in walk_scope([region]):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)) or node.id not in names:
                continue
            users = (self.statement.users(node) if self.statement is not None else None) or []
            # A read in the same statement (`h = f(h)`) or an earlier one sees the value
            # of the previous iteration, unless the name is assigned again at the top of the
            # region before that read: then the read is an inner loop's, on its own values.
            here = _position(statement_of[id(node)])
            if any(id(u) not in statement_of or (_position(statement_of[id(u)]) <= here
                                                 and node.id not in reset_before.get(id(u), ()))
                   for u in users):
                if node.id not in passed_on:
                    passed_on.append(node.id)
        return [n for n in names if n in passed_on]

    def is_read(self, target) -> bool:
        """Whether any name the assignment target `target` binds is ever read (by the
        def-use chains; True when there are none to ask)."""
        for node in walk_scope([target]):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                users = self.statement.users(node) if self.statement is not None else None
                if users is None or users:
                    return True
        return False

    def info(self, node) -> SourceInfo:
        """Where `node` is, as a SourceInfo (made once per node: staging asks often), with
        the `np.errstate` staging is under (`under_errstate`)."""
        info = self._infos.get(node)
        if info is None:
            info = self._infos[node] = self._located(node)
        return info._replace(errstate=_errstate.settings) if _errstate.settings else info

    def _located(self, node) -> SourceInfo:
        try:   # (every node the parser made has all four)
            line, col, end_line, end_col = node.lineno, node.col_offset, node.end_lineno, node.end_col_offset
        except AttributeError:
            line, col = getattr(node, "lineno", None), getattr(node, "col_offset", 0)
            end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        line = line or self.node.lineno
        end_col = end_col + 1 if end_col is not None and end_line == line else None
        return source_info(self.filename, line, col + 1, self.anchor_name, end_col, self.anchor_line)


class _ErrState(threading.local):
    settings: tuple = ()   # SourceInfo.errstate of the code being staged now


_errstate = _ErrState()


def staging_errstate() -> tuple:
    """The `np.errstate` the code being staged now runs under (SourceInfo.errstate): part of
    the staging-cache key of a function staged inside a `with np.errstate(...)` block."""
    return _errstate.settings


@contextlib.contextmanager
def under_errstate(settings: dict):
    """Stages the code inside as running under `np.errstate(**settings)`, within the
    errstate staging is under already (`all` sets every kind, then each kind named)."""
    state = dict(_errstate.settings)
    if settings.get("all") is not None:
        state.update(dict.fromkeys(ERRSTATE_KINDS, settings["all"]))
    state.update((kind, settings[kind]) for kind in ERRSTATE_KINDS if settings.get(kind) is not None)
    outer, _errstate.settings = _errstate.settings, tuple(sorted(state.items()))
    try:
        yield
    finally:
        _errstate.settings = outer


def last_return_info(fn) -> SourceInfo | None:
    """Where `fn` returns its value: its last `return` statement (a lambda's body), or None
    when `fn` has no source s2s can read (a builtin, a partial, a transformed function)."""
    if not hasattr(fn, "__code__"):
        return None
    try:
        source = function_source(fn)
    except StagingError:
        return None
    if isinstance(source.node, ast.Lambda):
        return source.info(source.node.body)
    returns = [node for node in walk_scope(source.node.body) if isinstance(node, ast.Return)]
    return source.info(returns[-1]) if returns else None


def walk_scope(statements):
    """Every node of `statements`, without entering nested functions and classes."""
    stack = list(reversed(list(statements)))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _innermost_statements(region) -> dict[int, object]:
    """id(node) -> the innermost statement containing it, for every node of `region`."""
    found: dict[int, object] = {}

    def visit(node, statement):
        if isinstance(node, ast.stmt):
            statement = node
        found[id(node)] = statement
        for child in ast.iter_child_nodes(node):
            visit(child, statement)
    visit(region, region)
    return found


def _resets_before(region) -> dict[int, frozenset[str]]:
    """id(node) -> the names that a plain assignment (`=`, or annotated with a value) among
    `region`'s own statements (its body, and separately its else block) sets before the
    statement holding `node`: on every path to `node` those names hold values from this
    pass, not from the one before."""
    found: dict[int, frozenset[str]] = {}
    for block in (getattr(region, "body", []), getattr(region, "orelse", [])):
        assigned: frozenset[str] = frozenset()
        for statement in block:
            for node in walk_scope([statement]):
                found[id(node)] = assigned
            targets = []
            if isinstance(statement, ast.Assign):
                targets = statement.targets
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                targets = [statement.target]
            assigned |= {n.id for n in walk_scope(targets)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return found


def _position(node) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


# id(code object) -> (a weak reference to it, its FunctionSource); its entry goes when the
# code object does. Nested functions' sources live in their parent's `nested`.
_sources: dict = {}
_sources_lock = threading.Lock()


def function_source(fn) -> FunctionSource:
    """The AST of a Python function or lambda, found in its file by line and column, after
    checking that the file's current text compiles to the code `fn` runs."""
    code = fn.__code__
    cached = _sources.get(id(code))
    if cached is not None and cached[0]() is code:
        return cached[1]
    statement, node = _node_in_current_text(fn)
    filename = code.co_filename
    source = FunctionSource(node, filename, fn.__qualname__, *scope_of(node, statement.has_walrus), statement,
                            anchor_name=fn.__qualname__.replace(".<locals>", ""), anchor_line=node.lineno)
    key = id(code)

    def forget(_ref, key=key):
        with _sources_lock:
            entry = _sources.get(key)
            if entry is not None and entry[0]() is None:
                del _sources[key]
    with _sources_lock:
        _sources[key] = (weakref.ref(code, forget), source)
    return source


def _node_in_current_text(fn):
    """The parse of `fn`'s file as it is now, and `fn`'s node in it; a StaleSourceError if
    that text does not compile to the code `fn` runs."""
    code = fn.__code__
    filename = code.co_filename
    linecache.checkcache(filename)   # an edited file is read again (registered texts stay)
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        raise StagingError(
            f"cannot read the source of {fn.__qualname__} (defined in {filename})",
            "s2s reads the function's source text: define it in a file (or a notebook cell), "
            "not with exec() or at an interactive prompt without history")
    try:
        parsed = _parse_file(filename, lines)
    except SyntaxError:
        raise _stale_source_error(fn, filename) from None
    statement = _statement_at(parsed, filename, code)
    candidates = statement.compiled_functions().get((code.co_qualname, code.co_firstlineno), []) \
        if statement is not None else []
    found = _find_node(parsed, filename, code) if candidates else None
    # The text at `fn`'s own node must compile to `fn`'s code: two lambdas on one line share
    # a name and a line, and an edit of one must not pass for the other, unchanged.
    if found is None or not any(_same_code(code, c) for c in candidates
                                if _find_in(found[0].tree, c, code.co_firstlineno) is found[1]):
        # Moved, perhaps: the same code at one other place in the file is the same function.
        moved = [c for (qualname, _), codes in _compiled_functions(parsed, filename).items()
                 if qualname == code.co_qualname for c in codes if _same_code(code, c)]
        found = _find_node(parsed, filename, moved[0]) if len(moved) == 1 else None
    if found is None:
        raise _stale_source_error(fn, filename)
    return found


def _find_node(parsed: ParsedFile, filename: str, code) -> tuple[Statement, object] | None:
    """The top-level statement that holds the def or lambda `code` was compiled from, and
    its node there, or None."""
    statement = _statement_at(parsed, filename, code)
    if statement is None:
        return None
    node = _find_in(statement.tree, code, code.co_firstlineno)
    return (statement, node) if node is not None else None


def _is_def_at(node, name: str, line: int) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name and \
        line in (node.lineno, min([node.lineno] + [d.lineno for d in node.decorator_list]))


def _find_in(tree, code, line: int):
    if code.co_name == "<lambda>":
        lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
        if len(lambdas) > 1:
            arg_names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            lambdas = [n for n in lambdas
                       if tuple(a.arg for a in n.args.args + n.args.kwonlyargs) == arg_names] or lambdas
        if len(lambdas) > 1:
            # Several lambdas with the same arguments on one line: match the body's column.
            columns = {pos[2] for pos in code.co_positions() if pos[2] is not None}
            lambdas = [n for n in lambdas if n.body.col_offset in columns] or lambdas
        return lambdas[0] if lambdas else None
    if _is_def_at(tree, code.co_name, line):   # a top-level def: no need to look inside
        return tree
    return next((n for n in ast.walk(tree) if _is_def_at(n, code.co_name, line)), None)


def nested_function_source(parent: FunctionSource, node) -> FunctionSource:
    """The FunctionSource of a def or lambda nested in a function being staged."""
    source = parent.nested.get(node)
    if source is None:   # read from the parent's own parse, never from a newer text
        name = getattr(node, "name", "<lambda>")
        if isinstance(node, ast.Lambda):   # one line of its def: counted from the def around it
            anchor_name, anchor_line = parent.anchor_name, parent.anchor_line
        else:
            anchor_name, anchor_line = f"{parent.anchor_name}.{name}", node.lineno
        source = parent.nested.setdefault(node, FunctionSource(
            node, parent.filename, f"{parent.name}.<locals>.{name}",
            *scope_of(node, parent.statement is None or parent.statement.has_walrus), parent.statement,
            anchor_name=anchor_name, anchor_line=anchor_line))
    return source


BUILTINS = vars(builtins)


def classify_names(fn) -> dict[str, str]:
    """Every name `fn`'s own body reads: 'argument', 'local', 'closure', 'global' or 'builtin'.

    Locals and arguments come from the source (`scope_of`); the rest is
    resolved through the function object (closure cells, `__globals__`, builtins), the
    same order the staging walk looks names up in. Unresolvable names are 'undefined'.
    """
    source = function_source(fn)
    node = source.node
    arg_names = {a.arg for a in arguments_of(node.args)}
    nested = {id(n) for inner in ast.walk(node) if inner is not node and isinstance(
        inner, (ast.FunctionDef, ast.Lambda)) for n in ast.walk(inner)}
    kinds: dict[str, str] = {}
    for n in ast.walk(node):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)) or id(n) in nested:
            continue
        name = n.id
        if name in arg_names:
            kinds[name] = "argument"
        elif name in source.local_names:
            kinds[name] = "local"
        elif name in fn.__code__.co_freevars:
            kinds[name] = "closure"
        elif name in fn.__globals__:
            kinds[name] = "global"
        elif name in BUILTINS:
            kinds[name] = "builtin"
        else:
            kinds[name] = "undefined"
    return kinds


def check_supported_scope(source: FunctionSource) -> None:
    """Rejects `global` and `nonlocal`, which would make staging write outside the function
    (a nested function's are found when it is staged)."""
    if source.declarations:
        node = source.declarations[0]
        kind = "global" if isinstance(node, ast.Global) else "nonlocal"
        raise UnsupportedSyntaxError(
            f"`{kind}` statements are not supported in staged functions",
            "return the new value instead of assigning to an outer variable",
            source.info(node))
