"""Review diffs stay local: 20 realistic one-line edits of examples/mlp.py, each emitted with
`s2s emit` (in a subprocess, as a user runs it), and the number of emitted lines each one
changes across all the exported files, bounded per edit.

Edits that only move code (a blank line or a comment above a function, an import) must
change nothing: location comments count lines from the enclosing `def`, and the header
names no line. Other edits may change only the lines that depend on them: temporaries are
named from what they are, not numbered through the file. Every statement of a derivative
carries its source line, cotangent accumulations too (`logits_bar = shifted_bar + ...  #
mlp.py predict+2`, in grad, value_and_grad, vjp and per_example_grad), so an edit that
moves lines inside predict or log_softmax changes those four comments as well.

To print the table of lines changed per edit, for this checkout and for another one (the
baseline before a change):

    python -m tests.workflows.test_edit_locality /work/main
"""
from __future__ import annotations

import difflib
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import pytest

from tests.helpers import CHECKOUT_PATH, ROOT, import_path, run_s2s

EXAMPLE = os.path.join(ROOT, "examples", "mlp.py")



class Edit(NamedTuple):
    """One edit of the original examples/mlp.py: `old` (found exactly once, or at every
    occurrence for a rename) becomes `new`; `most` is how many emitted lines it may change."""
    what: str
    old: str
    new: str
    most: int
    rename: bool = False

    def apply(self, text: str) -> str:
        count = text.count(self.old)
        assert count > 1 if self.rename else count == 1, f"{self.old!r} occurs {count} times in mlp.py"
        return text.replace(self.old, self.new)


EDITS = [Edit(*e) for e in [
    ("blank line above init_params", "def init_params", "\ndef init_params", 0),
    ("comment above predict", "def predict", "# the MLP's logits\ndef predict", 0),
    ("blank line above log_softmax", "def log_softmax", "\ndef log_softmax", 0),
    ("comment above loss's decorator", "@s2s.export(", "# reviewed in CI\n@s2s.export(", 0),
    ("import added at the top", "import os\n", "import math\nimport os\n", 0),
    ("docstring added to predict", "def predict(params, x):\n",
     "def predict(params, x):\n    \"\"\"The logits.\"\"\"\n", 41),
    ("epsilon inside the log", "keepdims=True))\n", "keepdims=True) + 1e-12)\n", 12),
    ("axis=-1 -> -1 (positional) in max", "logits.max(axis=-1,", "logits.max(-1,", 0),
    ("local renamed: shifted -> z", "shifted", "z", 38, True),
    ("local renamed: h -> hidden", "h = np.tanh(x @ params[\"W1\"] + params[\"b1\"])\n    return h @",
     "hidden = np.tanh(x @ params[\"W1\"] + params[\"b1\"])\n    return hidden @", 33),
    ("unused value in predict", "    return h @", "    unused = x.sum()\n    return h @", 22),
    ("unused value in log_softmax", "    shifted = logits -", "    unused = logits.mean()\n    shifted = logits -", 47),
    ("np.tanh -> np.sin", "np.tanh(", "np.sin(", 16),
    ("+ 0.0 added", "+ params[\"b2\"]", "+ params[\"b2\"] + 0.0", 1),
    ("np.exp(shifted) -> np.exp(shifted * 1.0)", "np.exp(shifted)", "np.exp(shifted * 1.0)", 1),
    ("parameter renamed: logits -> scores", "(logits):\n    shifted = logits - logits.max",
     "(scores):\n    shifted = scores - scores.max", 49),
    (".mean() -> .sum() / y.shape[0]", ".sum(axis=-1).mean()", ".sum(axis=-1).sum() / y.shape[0]", 8),
    ("logits.max(...) -> np.max(logits, ...)", "logits.max(axis=-1, keepdims=True)",
     "np.max(logits, axis=-1, keepdims=True)", 0),
    ("helper renamed: log_softmax -> log_probs", "log_softmax", "log_probs", 47, True),
    ("product commuted: y * logp -> logp * y", "-(y * logp)", "-(logp * y)", 9),
]]


def emitted(source: str, folder: str, pythonpath: str) -> dict[str, list[str]]:
    """The files `s2s emit` writes for `source` (saved as mlp.py in `folder`): name -> lines."""
    os.makedirs(folder)
    with open(os.path.join(folder, "mlp.py"), "w") as f:
        f.write(source)
    out = os.path.join(folder, "out")
    result = run_s2s("emit", "mlp.py", "--out", out, pythonpath=pythonpath, cwd=folder)
    assert result.returncode == 0, result.stderr
    files = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            files[name] = f.read().splitlines()
    return files


def without_locations(files: dict[str, list[str]]) -> dict[str, list[str]]:
    """The emitted lines with their trailing location comments (`  # mlp.py predict+1`) cut."""
    return {name: [re.sub(r"  # [^#]*$", "", line) for line in lines] for name, lines in files.items()}


def lines_changed(before: dict[str, list[str]], after: dict[str, list[str]]) -> int:
    """Emitted lines that differ, over all files: a changed line counts once, as does an
    added or removed one (per replaced block, the larger of its two sides)."""
    total = 0
    for name in sorted(set(before) | set(after)):
        matcher = difflib.SequenceMatcher(None, before.get(name, []), after.get(name, []), autojunk=False)
        total += sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal")
    return total


def emit_all(workdir: str, pythonpath: str = CHECKOUT_PATH) -> list[dict[str, list[str]]]:
    """The emitted files of the original example and of each of EDITS, emitting with the
    s2s found on `pythonpath`."""
    with open(EXAMPLE) as f:
        original = f.read()
    sources = [original] + [edit.apply(original) for edit in EDITS]
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda k: emitted(sources[k], os.path.join(workdir, f"edit{k}"), pythonpath),
                             range(len(sources))))


def changes(outputs: list[dict[str, list[str]]], code_only: bool = False) -> list[int]:
    """Lines changed by each edit (with `code_only`, lines whose code changed: a line whose
    location comment alone moved is not counted)."""
    if code_only:
        outputs = [without_locations(files) for files in outputs]
    return [lines_changed(outputs[0], after) for after in outputs[1:]]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return emit_all(str(tmp_path_factory.mktemp("locality")))


@pytest.mark.parametrize("index", range(len(EDITS)), ids=[e.what for e in EDITS])
def test_edit_changes_only_the_lines_that_depend_on_it(outputs, index):
    edit, measured = EDITS[index], changes(outputs)[index]
    assert measured <= edit.most, f"{edit.what}: {measured} emitted lines changed, at most {edit.most} expected"


# Edits that change no computation: the emitted code stays the same (only location
# comments inside the edited function may move).
NO_COMPUTATION = ["blank line above init_params", "comment above predict", "blank line above log_softmax",
                  "comment above loss's decorator", "import added at the top", "docstring added to predict",
                  "unused value in predict", "unused value in log_softmax", "axis=-1 -> -1 (positional) in max",
                  "logits.max(...) -> np.max(logits, ...)", "helper renamed: log_softmax -> log_probs"]


def test_edits_that_change_no_computation_change_no_emitted_code(outputs):
    code = changes(outputs, code_only=True)
    changed = {e.what: n for e, n in zip(EDITS, code) if e.what in NO_COMPUTATION and n}
    assert not changed, f"emitted code changed by edits that compute nothing new: {changed}"


def main(argv: list[str]) -> None:
    """Prints `edit | lines changed before | after`, and the same counting only lines whose
    code changed: before with the s2s of the checkout named on the command line, after
    with this one."""
    baseline = argv[0] if argv else os.path.join(os.path.dirname(ROOT), "main")
    workdir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"s2s-locality-{os.getpid()}")
    columns, emitted_by = [], {}
    try:
        for code_only in (False, True):
            for label, pythonpath in (("before", import_path(baseline)), ("after", CHECKOUT_PATH)):
                if label not in emitted_by:
                    emitted_by[label] = emit_all(os.path.join(workdir, label), pythonpath)
                columns.append(changes(emitted_by[label], code_only))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(e.what) for e in EDITS)
    print(f"| {'edit':{width}} | before | after | code before | code after |")
    print(f"|{'-' * (width + 2)}|-------:|------:|------------:|-----------:|")
    for k, edit in enumerate(EDITS):
        print(f"| {edit.what:{width}} | " + " | ".join(f"{c[k]:{w}}" for c, w in zip(columns, (6, 5, 11, 10))) + " |")
    print(f"| {'total':{width}} | " + " | ".join(f"{sum(c):{w}}" for c, w in zip(columns, (6, 5, 11, 10))) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
