"""Review diffs stay local: 20 realistic one-line edits of examples/mlp.py, each emitted with
`s2s emit` (in a subprocess, as a user runs it), and the number of emitted lines each one
changes across all the exported files, bounded per edit.

Edits that only move code (a blank line or a comment above a function, an import) must
change nothing: location comments count lines from the enclosing `def`, and the header
names no line. Other edits may change only the lines that depend on them: temporaries are
named from what they are, not numbered through the file. Every statement of a derivative
carries its source line, cotangent accumulations too (`logits_bar = shifted_bar + ...  #
mlp.py predict+2`, in grad, value_and_grad and vjp), so an edit that moves lines inside
predict or log_softmax changes those three comments as well.

To print the table of lines changed per edit, for this checkout and for another one (the
baseline before a change):

    python -m tests.workflows.test_edit_locality /work/main
"""
from __future__ import annotations

import difflib
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import pytest

from tests.helpers import ROOT, run_s2s

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
     "def predict(params, x):\n    \"\"\"The logits.\"\"\"\n", 34),
    ("epsilon inside the log", "keepdims=True))\n", "keepdims=True) + 1e-12)\n", 11),
    ("axis=1 -> axis=-1 in max", "logits.max(axis=1,", "logits.max(axis=-1,", 0),
    ("local renamed: shifted -> z", "shifted", "z", 31, True),
    ("local renamed: h -> hidden", "h = np.tanh(x @ params[\"W1\"] + params[\"b1\"])\n    return h @",
     "hidden = np.tanh(x @ params[\"W1\"] + params[\"b1\"])\n    return hidden @", 28),
    ("unused value in predict", "    return h @", "    unused = x.sum()\n    return h @", 18),
    ("unused value in log_softmax", "    shifted = logits -", "    unused = logits.mean()\n    shifted = logits -", 37),
    ("np.tanh -> np.sin", "np.tanh(", "np.sin(", 13),
    ("+ 0.0 added", "+ params[\"b2\"]", "+ params[\"b2\"] + 0.0", 1),
    ("np.exp(shifted) -> np.exp(shifted * 1.0)", "np.exp(shifted)", "np.exp(shifted * 1.0)", 1),
    ("parameter renamed: logits -> scores", "(logits):\n    shifted = logits - logits.max",
     "(scores):\n    shifted = scores - scores.max", 36),
    (".mean() -> .sum() / y.shape[0]", ".sum(axis=1).mean()", ".sum(axis=1).sum() / y.shape[0]", 7),
    ("logits.max(...) -> np.max(logits, ...)", "logits.max(axis=1, keepdims=True)",
     "np.max(logits, axis=1, keepdims=True)", 0),
    ("helper renamed: log_softmax -> log_probs", "log_softmax", "log_probs", 37, True),
    ("product commuted: y * logp -> logp * y", "-(y * logp)", "-(logp * y)", 8),
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


def lines_changed(before: dict[str, list[str]], after: dict[str, list[str]]) -> int:
    """Emitted lines that differ, over all files: a changed line counts once, as does an
    added or removed one (per replaced block, the larger of its two sides)."""
    total = 0
    for name in sorted(set(before) | set(after)):
        matcher = difflib.SequenceMatcher(None, before.get(name, []), after.get(name, []), autojunk=False)
        total += sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal")
    return total


def measure(workdir: str, pythonpath: str = ROOT) -> list[int]:
    """Lines changed by each of EDITS, emitting with the s2s found on `pythonpath`."""
    with open(EXAMPLE) as f:
        original = f.read()
    sources = [original] + [edit.apply(original) for edit in EDITS]
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda k: emitted(sources[k], os.path.join(workdir, f"edit{k}"), pythonpath),
                                range(len(sources))))
    return [lines_changed(outputs[0], after) for after in outputs[1:]]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    return measure(str(tmp_path_factory.mktemp("locality")))


@pytest.mark.parametrize("index", range(len(EDITS)), ids=[e.what for e in EDITS])
def test_edit_changes_only_the_lines_that_depend_on_it(measured, index):
    edit = EDITS[index]
    assert measured[index] <= edit.most, \
        f"{edit.what}: {measured[index]} emitted lines changed, at most {edit.most} expected"


def main(argv: list[str]) -> None:
    """Prints `edit | lines changed before | after`: before with the s2s of the checkout
    named on the command line, after with this one."""
    baseline = argv[0] if argv else os.path.join(os.path.dirname(ROOT), "main")
    workdir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"s2s-locality-{os.getpid()}")
    try:
        before = measure(os.path.join(workdir, "before"), baseline)
        after = measure(os.path.join(workdir, "after"), ROOT)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(e.what) for e in EDITS)
    print(f"| {'edit':{width}} | before | after |")
    print(f"|{'-' * (width + 2)}|-------:|------:|")
    for edit, b, a in zip(EDITS, before, after):
        print(f"| {edit.what:{width}} | {b:6} | {a:5} |")
    print(f"| {'total':{width}} | {sum(before):6} | {sum(after):5} |")


if __name__ == "__main__":
    main(sys.argv[1:])
