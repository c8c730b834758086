"""Shorten this machine's paths in the stored tracebacks of executed notebooks.

    python tools/scrub_tracebacks.py notebooks/NN_name.ipynb ...

A cell that raises on purpose stores IPython's traceback, whose frames name files by
absolute path (the repository, site-packages, the Python install). nbval does not
compare tracebacks, so shortening them changes no test; it keeps the author's machine
out of the committed notebooks. `make execute` runs this after executing.
"""

import re
import sys
import sysconfig
from pathlib import Path

import nbformat

ROOT = str(Path(__file__).resolve().parent.parent) + "/"
SITE = re.compile(r"/[^\s\x1b\"':]*/site-packages/")
STDLIB = sysconfig.get_paths()["stdlib"] + "/"


def scrub(text: str) -> str:
    return SITE.sub("<site-packages>/", text).replace(ROOT, "").replace(STDLIB, "<python>/")


def main(paths) -> int:
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    clean = [scrub(line) for line in out["traceback"]]
                    changed |= clean != out["traceback"]
                    out["traceback"] = clean
        if changed:
            nbformat.write(nb, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
