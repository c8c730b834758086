"""Where a check finds the learner's files and the lesson's runs, and what a launch command names
(re-exported by :mod:`.core`)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn, Protocol


class Fails(Protocol):
    """What run_file and run_json need of a check's :class:`~.core.Exercise` (core imports this module)."""

    def fail(self, what: str, hint: str) -> NoReturn: ...


# --- files and scripts beside the notebook --------------------------------------------------------

def _session_folder(session: str) -> list[Path]:
    """The folder that Jupyter's server names in JPY_SESSION_NAME: the notebook's path (absolute: the kernel's
    working directory joined with the notebook's name), or in older JupyterLab a path relative to the server's
    root whose last part is a UUID before the file has a name (jupyter-server/jupyter_server#1059); the kernel
    then runs in that folder, so a relative name counts only when the working directory ends with its folder."""
    if not session.strip():
        return []
    named = Path(session.strip())
    if named.is_absolute():
        return [named.parent] if named.parent.is_dir() else []
    cwd = Path.cwd()
    parts = named.parent.parts
    if parts and cwd.parts[len(cwd.parts) - len(parts):] != parts:
        return []
    return [cwd]


def _running_notebook_folder() -> list[Path]:
    """The running notebook's folder when the front end names it, else nothing: Jupyter's server sets
    JPY_SESSION_NAME to its path (a UUID in place of the name in older JupyterLab); VS Code sets none
    (microsoft/vscode-jupyter#16291) but puts the path in the kernel's global __vsc_ipynb_file__
    (microsoft/vscode-jupyter#8531); nbclient and other front ends name nothing (the working directory is
    the notebook's folder there)."""
    found = _session_folder(os.environ.get("JPY_SESSION_NAME", ""))
    if found:
        return found
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    vsc = getattr(shell, "user_ns", {}).get("__vsc_ipynb_file__", "")
    if isinstance(vsc, str | os.PathLike) and str(vsc).endswith(".ipynb") and Path(vsc).parent.is_dir():
        return [Path(vsc).parent]
    return []


def _unique(folders: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for folder in folders:
        if not any(_same_folder(folder, seen) for seen in out):
            out.append(folder)
    return out


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def notebook_folders() -> list[Path]:
    """Where a learner's relative paths (scripts, their own run folders) may start: the running notebook's
    folder, the working directory, then the series' notebooks/."""
    from ddp_helpers.series import NOTEBOOK_DIR

    return _unique([*_running_notebook_folder(), Path.cwd(), NOTEBOOK_DIR])


def lesson_folders() -> list[Path]:
    """Where the lesson's own launches wrote their runs, in order: the running notebook's folder when the front
    end names it, the kernel's working directory (the notebook's folder in JupyterLab, VS Code, nbclient and a
    hub), and only when no front end names the notebook, the series' notebooks/ as a last resort."""
    from ddp_helpers.series import NOTEBOOK_DIR

    named = _running_notebook_folder()
    return _unique([*named, Path.cwd(), *([] if named else [NOTEBOOK_DIR])])


def readable(folder: Path) -> str:
    """A folder as a learner reads it: relative to the working directory when inside it ("." for itself),
    else under ~, else absolute."""
    folder = Path(folder)
    for base, prefix in ((Path.cwd(), "."), (Path.home(), "~")):
        try:
            rel = folder.resolve().relative_to(base.resolve())
        except (ValueError, OSError):
            continue
        return prefix if str(rel) == "." else (str(rel) if prefix == "." else f"~/{rel}")
    return str(folder)


def where_looked(folders: Iterable[Path]) -> str:
    """The folders searched, for a message: "notebooks (the series' notebooks/), . (the working directory)"."""
    from ddp_helpers.series import NOTEBOOK_DIR

    named, cwd = _running_notebook_folder(), Path.cwd()
    out = []
    for folder in folders:
        role = ("the notebook's folder" if any(_same_folder(folder, n) for n in named) else
                "the working directory" if _same_folder(folder, cwd) else
                "the series' notebooks/" if _same_folder(folder, NOTEBOOK_DIR) else "")
        out.append(f"{readable(folder)} ({role})" if role else readable(folder))
    return ", ".join(out)


def _first_file(relative: Path, folders: list[Path]) -> Path | None:
    return next((folder / relative for folder in folders if (folder / relative).is_file()), None)


def run_file(ex: Fails, relative: str | os.PathLike, launch: str) -> Path:
    """A file that the lesson's launch ``launch`` (e.g. "the launch of section 2") wrote under the
    notebook's folder; a CheckFailed naming that launch and the folders searched when it is missing."""
    folders = lesson_folders()
    found = _first_file(Path(relative), folders)
    if found is None:
        ex.fail(f"{relative} does not exist in {where_looked(folders)}, so there is no recorded run to check "
                "against.",
                f"run {launch} first (in this notebook, from its own folder), then this check again.")
    return found


def run_json(ex: Fails, relative: str | os.PathLike, launch: str) -> Any:
    """The JSON a lesson's launch wrote (see :func:`run_file`)."""
    import json

    try:
        return json.loads(run_file(ex, relative, launch).read_text())
    except (OSError, ValueError):
        ex.fail(f"{relative} cannot be read as JSON.", f"run {launch} again, then this check.")


def find_file(path: str | os.PathLike) -> Path | None:
    """``path`` itself when absolute, else the first notebook folder that holds it (None for a value that is
    no path: a number, an open file)."""
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        return None
    path = Path(path)
    if path.is_absolute():
        return path if path.is_file() else None
    return _first_file(path, notebook_folders())


def script_in(command_or_args: object, expected: str) -> str | None:
    """The path of the worker script ``expected`` (a file name) in a launch command or argument list."""
    if isinstance(command_or_args, str):
        try:
            words = shlex.split(command_or_args)
        except ValueError:
            words = command_or_args.split()
    elif isinstance(command_or_args, list | tuple):
        words = [str(w) for w in command_or_args]
    else:
        return None
    return next((w for w in words if w.endswith(".py") and Path(w).name == expected), None)


def flag(command: str, name: str) -> str | None:
    """The value of a torchrun flag in a command (``--max-restarts=2`` or ``--max-restarts 2``)."""
    spelled = "[-_]".join(re.escape(part) for part in name.split("-"))
    m = re.search(rf"(?:^|\s){spelled}(?:=|\s+)(\S+)", command or "")
    return m.group(1) if m else None


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """The calls in ``tree`` whose function's last name is ``name`` (``dist.all_reduce`` -> all_reduce)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if last == name:
                found.append(node)
    return found


def caller_namespace() -> dict[str, object]:
    """The check cell's namespace (globals, then locals, of the first frame outside this package): a
    check finds there what the cell does not pass (the launch a result came from)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(__package__):
        frame = frame.f_back
    return {} if frame is None else {**frame.f_globals, **frame.f_locals}


def caller_values() -> list[object]:
    """The values of :func:`caller_namespace`."""
    return list(caller_namespace().values())


def launches_in(values: Iterable[object], script: str) -> list[Any]:
    """The launch results (or launch failures: they carry the command too) among ``values`` that ran
    the worker script named ``script``."""
    return [v for v in values if isinstance(getattr(v, "command", None), str) and script_in(v.command, script)]
