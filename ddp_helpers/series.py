"""The series itself: which notebooks, in what order, their titles, and how strict nbval runs them.

The one place these are written. The Makefile, ``tools/`` (navigation, handouts, run times,
gpu-check), the tests and ``python -m ddp_helpers.perf --suite`` all read them from here.
Standard library only, so that the Makefile can ask it with any ``python3`` before the
virtual environment exists::

    python3 ddp_helpers/series.py notebooks    # notebooks/00_orientation.ipynb notebooks/01_...
    python3 ddp_helpers/series.py nbval-args   # --nbval --nbval-current-env ...
    python3 ddp_helpers/series.py nbval-env    # CUDA_VISIBLE_DEVICES= DDP_BACKEND=gloo ...
    python3 ddp_helpers/series.py cpu-env      # CUDA_VISIBLE_DEVICES= DDP_BACKEND=gloo
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"  # 00_orientation.ipynb ... : the number is the order
NAV_TAG = "nav"  # the navigation cells tools/nav.py writes; never a title

# The CPU path on every machine: GPUs hidden from torch (kernel and workers), gloo forced through
# the runtime's DDP_BACKEND switch, so a GPU box stores what a laptop does. The GPU path is make gpu-check.
CPU_ENV: dict[str, str] = {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}
# Strict nbval: launches print their summary only (no live stream), set hashing fixed.
NBVAL_ENV: dict[str, str] = {**CPU_ENV, "DDP_HELPERS_LIVE": "quiet", "PYTHONHASHSEED": "0"}
NBVAL_ARGS: tuple[str, ...] = ("--nbval", "--nbval-current-env",
                               "--nbval-sanitize-with", "notebooks/sanitize.cfg", "--nbval-cell-timeout=300")


def notebooks(root: Path = ROOT) -> list[Path]:
    """The series' notebooks in order."""
    return sorted((root / "notebooks").glob(NOTEBOOK_GLOB))


def _text(source: str | Sequence[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


def title_cell(notebook: Mapping[str, Any]) -> Any:
    """The notebook's title cell: its first markdown cell that opens with ``# `` (navigation cells never
    count), or None. Takes a notebook read by nbformat or the notebook's JSON; returns that cell."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown" and NAV_TAG not in cell.get("metadata", {}).get("tags", []) \
                and _text(cell["source"]).startswith("# "):
            return cell
    return None


def title_of(notebook: Mapping[str, Any] | Path) -> str:
    """The notebook's title: the first line of :func:`title_cell`. Takes a path, a notebook read by
    nbformat or the notebook's JSON."""
    if isinstance(notebook, Path):
        notebook = json.loads(notebook.read_text())
    cell = title_cell(notebook)
    if cell is None:
        raise ValueError("the notebook has no markdown cell opening with '# Title'")
    return _text(cell["source"]).splitlines()[0][2:].strip()


WRITEFILE = re.compile(r"%%writefile (\S+)\n")


def worker_scripts(root: Path = ROOT) -> dict[str, str]:
    """What the notebooks' ``%%writefile`` cells write: {path relative to notebooks/: text}, the cells
    taken in the series' order, so a later cell that writes the same file wins, as in a run."""
    files: dict[str, str] = {}
    for path in notebooks(root):
        for cell in json.loads(path.read_text())["cells"]:
            source = _text(cell["source"])
            if cell["cell_type"] == "code" and (m := WRITEFILE.match(source)):
                body = source[m.end():]   # IPython ends a cell with a newline before %%writefile sees it
                files[m.group(1)] = body if body.endswith("\n") else body + "\n"
    return files


def write_worker_scripts(folder: Path = NOTEBOOK_DIR) -> int:
    """Write :func:`worker_scripts` under ``folder`` (by default where the notebooks write them);
    returns how many. The unit tests and ``make gpu-check`` need them without running a notebook.
    A file that already holds its text is left alone: its time stays that of the notebook's own write,
    which the exercise checks compare with their launch (a run of an older script is refused)."""
    files = worker_scripts()
    for rel, text in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
    return len(files)


def nbval_command(python: str, paths: Sequence[Path | str]) -> list[str]:
    """Strict nbval over ``paths``, as ``make nbval`` runs it (run it from the repository root)."""
    return [python, "-m", "pytest", "-q", *NBVAL_ARGS, *map(str, paths)]


def nbval_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` with what ``make nbval`` sets on top."""
    return {**base, **NBVAL_ENV}


def _shell_words(env: Mapping[str, str]) -> str:
    for value in env.values():
        if re.search(r"\s", value):
            raise ValueError(f"{value!r}: a value with spaces cannot be a make variable word")
    return " ".join(f"{k}={v}" for k, v in env.items())


def main(argv: Sequence[str]) -> int:
    answers = {
        "notebooks": lambda: " ".join(str(p.relative_to(ROOT)) for p in notebooks()),
        "nbval-args": lambda: " ".join(NBVAL_ARGS),
        "nbval-env": lambda: _shell_words(NBVAL_ENV),
        "cpu-env": lambda: _shell_words(CPU_ENV),
    }
    if len(argv) != 1 or argv[0] not in answers:
        print(f"usage: python3 ddp_helpers/series.py {{{','.join(answers)}}}", file=sys.stderr)
        return 2
    print(answers[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
