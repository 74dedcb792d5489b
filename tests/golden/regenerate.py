"""Rewrites the golden files: `python -m tests.golden.regenerate`.

The jaxprs and modules of tests/golden/cases.py, and the derivative files that
`s2s emit examples/mlp.py --out tests/golden/derivatives` writes.
"""
import os
import subprocess
import sys

import s2s
from tests.golden.cases import CASES

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DERIVATIVES = os.path.join("tests", "golden", "derivatives")
EXPORTING_MODULE = os.path.join("examples", "mlp.py")


def golden_texts(name):
    fn, args = CASES[name]
    return {f"{name}.jaxpr.txt": str(s2s.make_jaxpr(fn)(*args)) + "\n",
            f"{name}.py": s2s.emit_python(fn, *args, name=name)}


def main():
    for name in CASES:
        for filename, text in golden_texts(name).items():
            with open(os.path.join(HERE, filename), "w", newline="\n") as f:
                f.write(text)
            print(f"wrote tests/golden/{filename}")
    subprocess.run([sys.executable, "-m", "s2s", "emit", EXPORTING_MODULE, "--out", DERIVATIVES],
                   cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
