"""The launcher's records of each launch.

Every launch records its provenance: the script's absolute path and the sha256 of its content at launch,
when it started and ended, its world size and script arguments (on the :class:`~ddp_helpers.launch.LaunchResult`),
and the results that ``torchrun`` returned are kept in a process-local registry (:func:`is_registered_launch`), so
a hand-typed or copied ``LaunchResult`` is recognisably not a launch. After every launch, ok or failed, the
same record is written as JSON into the run's output (:func:`output_targets`): ``.launch.json`` in each
folder the script's arguments name that the launch wrote into, ``.<file>.launch.json`` beside each file
argument the launch wrote, and ``.launch.json`` in the folder of a script's argparse ``--out`` default when
the launch did not pass it. A folder the launch did not write into keeps the record of the launch that did.
The exercise checks read them (:mod:`ddp_helpers.exercises.provenance`). With DDP_HELPERS_RECORD set
(`make execute`), each launch is also appended to that file for tools/gpu_check.py (:func:`record_launch`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LAUNCHER = "ddp_helpers.launch.torchrun"
PROVENANCE_FILE = ".launch.json"
# the results torchrun() returned (or attached to its errors) in this process, by id; a copy or a
# hand-made LaunchResult is not here, and an entry goes when its result is garbage-collected
_LAUNCHES: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def is_registered_launch(value: object) -> bool:
    """``value`` is a result that :func:`torchrun` itself made in this process (not typed, copied or unpickled)."""
    return value is not None and _LAUNCHES.get(id(value)) is value


def register(result: Any) -> Any:
    """Keep ``result`` (a LaunchResult torchrun made) in the registry; returns it."""
    _LAUNCHES[id(result)] = result
    return result


def file_sha256(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's bytes ("" when it cannot be read)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def sidecar(path: str | os.PathLike) -> Path:
    """Where the provenance of a launch that wrote the file ``path`` is kept: ``.<name>.launch.json`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}{PROVENANCE_FILE}"


_OUT_OPTION_RE = re.compile(r"^--out(put)?([-_]?dir)?$")


def _argparse_out_default(script: Path) -> tuple[list[str], str] | None:
    """(the option's spellings, its default) of an ``--out``/``--out-dir``/``--output`` argparse option with a
    literal string default in ``script``, else None."""
    try:
        tree = ast.parse(script.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        default = next((k.value.value for k in node.keywords if k.arg == "default"
                        and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), None)
        if default and any(_OUT_OPTION_RE.match(n) for n in names):
            return names, default
    return None


def _written_since(folder: Path, started: float) -> bool:
    """The folder or one of its entries (a file, a subfolder) changed at or after ``started``; the launch's own
    record there does not count."""
    if folder.stat().st_mtime >= started:
        return True
    with os.scandir(folder) as entries:
        return any(e.name != PROVENANCE_FILE and e.stat().st_mtime >= started for e in entries)


def output_targets(script: Path, script_args: Sequence[str], cwd: Path, started: float) -> list[Path]:
    """The provenance files a launch writes (see the module's docstring), for a launch run in ``cwd``:

    - ``DIR/.launch.json`` for each script argument (or the value of ``--flag=value``) naming an existing
      folder that the launch wrote into (the folder, or an entry of it, changed since ``started``), except
      the launch's folder itself and the folders above it: a launch that failed before writing anything
      (notebook 07's hang demo, into the lesson's folder) leaves the record of the run whose files are there;
    - ``.<name>.launch.json`` beside each argument naming a file written since ``started`` (an output file
      in a folder shared with other launches, e.g. runs/10_performance/sweep.json);
    - the fallback for workers whose output folder is an argparse default: when the script declares
      ``--out`` (``--out-dir``, ``--output``) with a literal string default and the launch does not pass
      that option, ``.launch.json`` in that default folder if it exists after the launch.
    """
    cwd = cwd.resolve()
    above = {cwd, *cwd.parents}
    values = [a.split("=", 1)[1] if a.startswith("-") and "=" in a else a for a in script_args]
    option = _argparse_out_default(script)
    if option is not None and not any(a.split("=", 1)[0] in option[0] for a in script_args):
        values.append(option[1])
    targets: list[Path] = []
    for value in values:
        if not value or value.startswith("-"):
            continue
        path = Path(value) if Path(value).is_absolute() else cwd / value
        try:
            if path.is_dir() and path.resolve() not in above and _written_since(path, started):
                target = path / PROVENANCE_FILE
            elif path.is_file() and path.stat().st_mtime >= started:
                target = sidecar(path)
            else:
                continue
        except OSError:
            continue
        if target not in targets:
            targets.append(target)
    return targets


def write_provenance(target: Path, record: Mapping[str, object]) -> bool:
    """Write the record as JSON to ``target`` atomically (a temporary file, then os.replace); False when the
    folder cannot be written (a launch never fails for its record)."""
    tmp = target.parent / f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_text(json.dumps(dict(record), indent=1) + "\n")
        os.replace(tmp, target)
        return True
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False


RECORD_ENV = "DDP_HELPERS_RECORD"


def record_launch(path: Path, nproc: int, nnodes: int, script_args: list[str], env: Mapping[str, str],
                   torchrun_args: list[str], timeout: float, codes: list[int]) -> None:
    """Append this launch to the JSON-lines file DDP_HELPERS_RECORD names, if set.

    `make execute` sets it, and tools/gpu_check.py replays the recorded launches on GPUs.
    """
    target = os.environ.get(RECORD_ENV)
    if not target:
        return
    entry = {"script": str(path), "nproc": nproc, "nnodes": nnodes, "args": script_args,
             "env": env,
             "torchrun_args": list(torchrun_args), "timeout": timeout,
             "outcome": "failed" if any(codes) else "ok"}
    with open(target, "a") as f:
        f.write(json.dumps(entry) + "\n")
