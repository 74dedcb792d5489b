"""s2s.frontend.scopes: a function's locals and declarations, held to Python's own symbol table."""
import ast
import os
import symtable

from s2s.frontend.scopes import scope_of

# Python's own symbol table is the oracle for which names a function binds (`scope_of`).
TRICKY_SCOPES = '''
import os.path as osp
def everything(a, /, b=1, *args, c, d=2, **kwargs):
    import os.path, json as js
    from math import sqrt as root, pi
    e, (f, *g) = 1, (2, 3)
    h: int
    i: int = 3
    j += 1
    k[0] = l.m = 1
    with open(a) as (n, o), open(b) as p:
        pass
    for q, r in []:
        del s
    try:
        pass
    except ValueError as t:
        pass
    [u for u in args if (v := u)]
    {w: x for w in args for x in w}
    (y for y in args)
    def inner(z=(aa := 1), *, bb=lambda cc: cc) -> (dd := 2):
        ee = z
    class Klass(base := object, metaclass=type):
        ff = 1
    match a:
        case [1, *gg] | [2, *gg]:
            pass
        case {"k": hh, **ii}:
            pass
        case Point(x=jj) as kk:
            pass
    lam = lambda ll, *mm, nn=(oo := 3): ll + pp
    return qq
def declares():
    global rr
    rr = 1
    def inner():
        nonlocal ss
        ss = 2
    ss = 3
'''


def _symtable_locals(table) -> dict:
    found = {}
    for child in table.get_children():
        if child.get_type() == "function":
            found[(child.get_name(), child.get_lineno())] = frozenset(
                s.get_name() for s in child.get_symbols() if s.is_local() and not s.is_global())
        found.update(_symtable_locals(child))
    return found


def _scopes_against_symtable(text: str) -> tuple[int, list]:
    """How many functions of `text` were checked, and those whose `scope_of` differs from
    the symbol table's: by the full pass, and where the function's text has no `:=`, by
    the pass that steps over expressions too (both must find the same declarations)."""
    expected = _symtable_locals(symtable.symtable(text, "<scopes>", "exec"))
    lines = text.splitlines()
    checked, differ = 0, []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            key = (getattr(node, "name", "lambda"), min([node.lineno] + [d.lineno for d in getattr(
                node, "decorator_list", [])]))
            if key in expected:
                checked += 1
                full = scope_of(node)
                if full[0] != expected[key]:
                    differ.append((key, sorted(full[0] ^ expected[key])))
                if not any(":=" in line for line in lines[node.lineno - 1:node.end_lineno]):
                    checked += 1
                    stepping = scope_of(node, has_walrus=False)
                    if stepping[0] != expected[key] or stepping[1] != full[1]:
                        differ.append((key, "without :=", sorted(stepping[0] ^ expected[key])))
    return checked, differ


def test_scope_of_binds_what_python_binds():
    checked, differ = _scopes_against_symtable(TRICKY_SCOPES)
    assert checked == 6 + 2 and differ == []   # `declares` and its `inner` have no walrus


def test_scope_of_without_walrus_binds_what_python_binds():
    """Every binding form but the walrus, for the pass that steps over expressions."""
    text = TRICKY_SCOPES
    for walrus, plain in (("(v := u)", "v"), ("(aa := 1)", "1"), ("(dd := 2)", "2"),
                          ("base := object", "object"), ("(oo := 3)", "3")):
        assert walrus in text
        text = text.replace(walrus, plain)
    checked, differ = _scopes_against_symtable(text)
    assert checked == 12 and differ == []


def test_scope_of_agrees_with_python_over_the_standard_library():
    library = os.path.dirname(os.__file__)
    total = 0
    for name in ("ast.py", "functools.py", "tempfile.py", "dataclasses.py", "argparse.py", "inspect.py"):
        with open(os.path.join(library, name)) as f:
            checked, differ = _scopes_against_symtable(f.read())
        assert differ == [], (name, differ[:5])
        total += checked
    assert total > 500


def test_global_and_nonlocal_are_found_by_the_same_pass():
    tree = ast.parse(TRICKY_SCOPES)
    declares = next(n for n in tree.body if getattr(n, "name", "") == "declares")
    inner = declares.body[2]
    assert [type(d).__name__ for d in scope_of(declares)[1]] == ["Global"]
    assert [type(d).__name__ for d in scope_of(inner)[1]] == ["Nonlocal"]
    assert "rr" not in scope_of(declares)[0] and "ss" not in scope_of(inner)[0]
