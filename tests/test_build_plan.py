"""What `s2s compile` builds: modules found and named from their package (or the folder
given), and keys that change with everything the compiled entry depends on."""
import os

import numpy as np

from s2s.build_plan import Target, discover

EXPORTING = "import s2s\n\n@s2s.export('f32[2]')\ndef f(x):\n    return x\n"


def write_files(root, files: dict) -> None:
    """Writes {relative path: text} under `root`, making folders as needed."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_package_modules_are_named_from_the_package_roots_parent(tmp_path):
    write_files(tmp_path, {"repo/pkg/__init__.py": "", "repo/pkg/models/__init__.py": EXPORTING,
                           "repo/pkg/models/dense.py": EXPORTING, "repo/pkg/helpers.py": "X = 1\n"})
    for given in ("repo", "repo/pkg", "repo/pkg/models"):   # whichever folder is compiled
        modules = {m.name: m for m in discover([str(tmp_path / given)])}
        assert sorted(modules) == ["pkg.models", "pkg.models.dense"]
        dense = modules["pkg.models.dense"]
        assert dense.in_package and dense.root == str(tmp_path / "repo")
        assert dense.relative == "pkg/models/dense.py"


def test_plain_modules_are_named_from_the_folder_given(tmp_path):
    write_files(tmp_path, {"plain/top.py": EXPORTING, "plain/sub/inner.py": EXPORTING,
                           "plain/sub/quiet.py": "X = 1\n"})
    modules = discover([str(tmp_path / "plain")])
    assert [(m.name, m.relative, m.in_package) for m in modules] == [
        ("top", "top.py", False), ("sub.inner", "sub/inner.py", False)]
    (alone,) = discover([str(tmp_path / "plain" / "sub" / "inner.py")])
    assert (alone.name, alone.relative) == ("inner", "inner.py")


def test_a_module_given_twice_is_compiled_once(tmp_path):
    write_files(tmp_path, {"twice/m.py": EXPORTING})
    modules = discover([str(tmp_path / "twice"), str(tmp_path / "twice" / "m.py")])
    assert [m.path for m in modules] == [os.path.join(str(tmp_path / "twice"), "m.py")]


def test_key_changes_with_the_text_the_constants_bytes_and_the_fields(tmp_path):
    write_files(tmp_path, {"k/m.py": EXPORTING})
    (module,) = discover([str(tmp_path / "k")])

    def key(text="module @m {}", consts=(np.zeros(2),), fields=None):
        return Target("m.f", module, "f", "primal", text, list(consts), fields or {"inputs": []}).key
    base = key()
    assert key() == base
    assert key(text='module @m {} loc("m.py":2:1)') != base
    assert key(consts=(np.array([0.0, 1e-300]),)) != base
    assert key(consts=(np.zeros(2, np.float32),)) != base
    assert key(fields={"inputs": [{"shape": [2], "dtype": "float32"}]}) != base
