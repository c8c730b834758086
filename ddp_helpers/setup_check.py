"""The first cell of notebook 00: is this kernel ready for the series? Any front end (JupyterLab,
VS Code, Colab, Kaggle, a JupyterHub) and any install (make venv, or the hosted way in the README).

    from ddp_helpers.setup_check import check_setup
    check_setup()      # raises SetupError saying what to do, else prints one line

Three things, each with the fix when it fails:
* torch is a supported release (SUPPORTED_TORCH, the range requirements.txt pins: 2.13.0 to 2.15.x);
* the kernel runs in a folder of the series' notebooks: every `%%writefile scripts/...` cell and every
  launch use paths relative to it (VS Code and JupyterLab start a notebook's kernel there; Colab and
  Kaggle start in their own folder);
* ipywidgets is importable (the notebooks' widgets; each also has a static picture).
"""

from __future__ import annotations

from pathlib import Path

from ddp_helpers.releases import torch_release

# The lowest release requirements.txt pins, and the highest minor release it pins (any patch of it);
# tests/test_setup_check.py holds these to requirements.txt.
SUPPORTED_TORCH = ((2, 13, 0), (2, 15))
NOTEBOOK_MARK = "00_*.ipynb"  # a folder of the series' notebooks: the full series or a student edition


class SetupError(RuntimeError):
    """The kernel cannot run the series as it is; the message says what to change."""


def problems(torch_version: str, folder: Path, widgets: bool) -> list[str]:
    """What stands between this kernel and the series, each with its fix; [] when ready."""
    found = []
    low, high = SUPPORTED_TORCH
    release = torch_release(torch_version)
    if not (low <= release and release[:2] <= high):
        found.append(f"torch {torch_version} is outside the releases the series is tested on "
                     f"({'.'.join(map(str, low))} to {'.'.join(map(str, high))}.x): install one of them "
                     f"(`pip install torch=={'.'.join(map(str, high))}.0`), then restart the kernel.")
    if not any(folder.glob(NOTEBOOK_MARK)):
        found.append(f"the kernel runs in {folder}, which holds none of the series' notebooks: every "
                     "launch and %%writefile path is relative to the notebooks' folder. Run "
                     "`%cd <the course folder>/notebooks` (Colab and Kaggle start elsewhere), or in VS Code "
                     "keep the setting jupyter.notebookFileRoot at its default, ${fileDirname}.")
    if not widgets:
        found.append("ipywidgets is missing: `pip install ipywidgets` (the notebooks' widgets; each also "
                     "shows a static picture), then restart the kernel.")
    return found


def check_setup(folder: Path | None = None) -> None:
    """Raise SetupError listing every problem of this kernel, else print that it is ready."""
    import importlib.util

    import torch

    found = problems(torch.__version__, Path.cwd() if folder is None else folder,
                     importlib.util.find_spec("ipywidgets") is not None)
    if found:
        raise SetupError("this kernel is not ready for the series:\n- " + "\n- ".join(found))
    print("set-up: the course's package, a supported torch, the notebooks' folder, ipywidgets: ready")
