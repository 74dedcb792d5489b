"""Rewrites the golden files from tests/golden/cases.py: `python -m tests.golden.regenerate`."""
import os

import s2s
from tests.golden.cases import CASES

HERE = os.path.dirname(os.path.abspath(__file__))


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


if __name__ == "__main__":
    main()
