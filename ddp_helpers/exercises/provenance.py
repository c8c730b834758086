"""Where a check's evidence came from: the learner's launch of the current script, and the lesson's own runs.

Three questions every launch check asks before it reads a run (issue 38, items 1, 2 and 7):

- :func:`current_launch`: is the value a result that ``torchrun`` returned in this kernel (not typed by hand,
  copied or unpickled), of the learner's own ``scripts/<name>`` beside the notebook (or the notebook's own copy
  elsewhere in its folder, such as notebook 08's runs/08_capstone/train_ddp.py: ``where``), not another
  folder's copy (such as the instructor's solution by absolute path), at the exercise's world size, and of
  the script's content as it is now (not a run of a version edited since)?
- :func:`prints_no_literal`: does the script print the expected answer as a constant it wrote itself,
  rather than compute it?
- :func:`lesson_run`: was the lesson run a check reads last written by the lesson's own launch? When another
  launch overwrote it (an exercise launched into the lesson's folder), the hint blames the lesson's data and
  says which cell to run again, never the learner's answer.

The records these read are the launcher's (:mod:`ddp_helpers.launch`): the provenance on each
:class:`~ddp_helpers.launch.LaunchResult`, and the ``.launch.json`` files a launch writes into its output.
"""

from __future__ import annotations

import ast
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ddp_helpers.exercises.core import Exercise, find_file, lesson_folders, numbers
from ddp_helpers.launch import PROVENANCE_FILE, LaunchResult, file_sha256, is_registered_launch, sidecar


def launch_of(value: object) -> LaunchResult | None:
    """The registered launch behind ``value``: the value itself, or the result a launch error carries
    (``WorkerFailed.result``); None for anything ``torchrun`` did not make in this process."""
    if is_registered_launch(value):
        return value  # type: ignore[return-value]
    inner = getattr(value, "result", None) if isinstance(value, BaseException) else None
    return inner if is_registered_launch(inner) else None


def exit_aborted(ex: Exercise, value: object) -> bool:
    """Whether ``value`` is the launch error of a run that ended in gloo's exit abort after its work (a
    WorkerFailed the learner passes as the answer: the work is judged, and the clean exit is noted); any other
    launch failure is refused, naming the rank and its exit code (issue 38, item 8)."""
    from ddp_helpers.launch import WorkerFailed

    if not isinstance(value, WorkerFailed):
        return False
    ex.require(value.exit_abort, f"the launch failed: rank {value.rank} exited with code {value.exitcode}.",
               "read the error the launch printed, fix the script, then launch it again.")
    return True


def learner_script(name: str, where: str | os.PathLike = "scripts") -> Path | None:
    """The learner's ``<where>/<name>`` (``scripts/<name>`` by default; ``where`` is relative to the notebook's
    folder): the first notebook folder that holds it (:func:`core.find_file`)."""
    found = find_file(Path(where) / name)
    return found.resolve() if found is not None else None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def current_launch(ex: Exercise, name: str, result: object, expected_script_name: str,
                   nproc: int | None = None, *, where: str | os.PathLike = "scripts") -> Path:
    """The learner's script that ``result`` (the check's ``name``) ran, after refusing, each with a hint that
    names what happened: a value ``torchrun`` did not return in this kernel (typed, copied), a launch of
    another script or of another folder's copy of it, a launch at another world size (``nproc`` processes in
    all, when given), and a launch of a version of the script that has changed since.

    The script is ``<where>/<expected_script_name>`` in the notebook's folder: ``scripts/`` by default, another
    folder for a notebook that launches its copy from there (notebook 08's runs/08_capstone/train_ddp.py);
    the hints name that path."""
    launch = launch_of(result)
    relative = (Path(where) / expected_script_name).as_posix()
    example = f"`{name} = torchrun(\"{relative}\", ...)`"
    if launch is None:
        ex.fail(f"`{name}` is not a result that `torchrun(...)` returned in this kernel (typed, copied or made "
                "another way), so it is no record of a run.",
                f"assign the launch itself, {example}, then run this check.")
    ran = Path(launch.script)
    ex.require(ran.name == expected_script_name,
               f"`{name}` is a launch of {ran.name}, not of {relative}.",
               f"launch the exercise's script: {example}.")
    mine = learner_script(expected_script_name, where)
    if mine is None:
        ex.fail(f"{relative} cannot be found beside this notebook.",
                "run the cell that writes it (from the notebook's folder), launch it, then this check.")
    ex.require(same_file(ran, mine),
               f"`{name}` ran {ran}, a copy in another folder, not your {relative} beside this notebook.",
               f"launch your own file by its relative path: {example}.")
    if nproc is not None:
        world = launch.nproc * launch.nnodes
        ex.require(world == nproc, f"`{name}` ran {world} process(es), the exercise asks for {nproc}.",
                   "look at the `nproc=` (and `nnodes=`) arguments of the launch.")
    ex.require(file_sha256(mine) == launch.sha256,
               f"you changed {relative} after launching it: `{name}` is a run of an older version of the "
               "script.",
               f"launch it again ({example}), then run this check.")
    return mine


# --- literal answers ------------------------------------------------------------------------------

_WRITERS = {"print", "write", "writelines", "write_text"}


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _constants(node: ast.AST) -> Iterable[ast.Constant]:
    """The constants an expression writes: f-strings' literal parts included, their format specs
    (``:.3f``) left out."""
    if isinstance(node, ast.Constant):
        yield node
    elif isinstance(node, ast.FormattedValue):
        yield from _constants(node.value)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _constants(child)


def _equals(constant: object, value: object) -> bool:
    if isinstance(value, str):
        return isinstance(constant, str) and value in constant
    if isinstance(constant, bool) or isinstance(value, bool):
        return False
    try:
        target = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    found = [float(constant)] if isinstance(constant, int | float) else \
        numbers(constant) if isinstance(constant, str) else []
    return any(math.isclose(x, target, rel_tol=1e-9, abs_tol=1e-12) for x in found)


def literal_prints(script_tree: ast.AST, values: Iterable[object]) -> list[int]:
    """The line numbers of print/write calls whose arguments hold a constant equal to one of ``values``
    (a number literal, or a string containing the number, or containing a string value)."""
    values = list(values)
    lines = []
    for node in ast.walk(script_tree):
        if isinstance(node, ast.Call) and _call_name(node) in _WRITERS:
            parts = [*node.args, *(k.value for k in node.keywords if k.arg not in ("file", "sep", "end", "flush"))]
            if any(_equals(c.value, v) for part in parts for c in _constants(part) for v in values):
                lines.append(node.lineno)
    return sorted(set(lines))


def prints_no_literal(ex: Exercise, script_tree: ast.AST, values: Iterable[object], script_name: str = "the script"
                      ) -> None:
    """Refuse a script that prints (or writes) the expected answer as a constant it typed: the check
    reads what the ranks printed, so the number must come from the computation."""
    lines = literal_prints(script_tree, values)
    ex.require(not lines,
               f"{script_name} prints the expected result as a constant it wrote itself (line {lines[0] if lines else 0}), "
               "so its output shows nothing the ranks computed.",
               "print the value the collective computed (e.g. `value.item()` in an f-string), not a number you "
               "typed.")


# --- the lesson's own runs ------------------------------------------------------------------------

def _record_path(relative: Path) -> tuple[Path, Path] | None:
    """(the run's path under a lesson folder, its provenance file): a folder's .launch.json, a file's sidecar."""
    for folder in lesson_folders():
        path = folder / relative
        if path.is_dir():
            return path, path / PROVENANCE_FILE
        if path.is_file():
            return path, sidecar(path)
    return None


def lesson_run(ex: Exercise, folder: str | os.PathLike, lesson_script_name: str, launch_description: str,
               nproc: int | None = None) -> dict[str, Any]:
    """The provenance of the lesson's run ``folder`` (a folder under the notebook's, or one output file
    there), after refusing a run that the lesson's launch ``launch_description`` (e.g. "the launch of
    scripts/07_eval_earlystop.py (section 2)") did not write last: another script's launch, a launch of the
    lesson's script at another world size (``nproc`` in all, when given: an exercise's launch into the
    lesson's folder), a failed launch, or no record at all. Every hint blames the lesson's data and says to
    run the lesson's launch again: the learner's answer is not what is wrong.

    No record is refused too: runs made before the launcher wrote records cannot be told apart from runs
    overwritten by hand, and running the lesson's launch again costs a minute.
    """
    relative = Path(folder)
    again = f"run {launch_description} again (its cell in this notebook), then this check."
    found = _record_path(relative)
    if found is None:
        ex.fail(f"{relative} does not exist, so there is no lesson run to check against.",
                f"run {launch_description} first, then this check.")
    _, record_file = found
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        ex.fail(f"the lesson's data in {relative} has no record of the launch that wrote it (it predates the "
                "launcher's records, or was made by hand), so it cannot be trusted.", again)
    script = str(record.get("script_name") or Path(str(record.get("script", ""))).name)
    ex.require(script == lesson_script_name,
               f"the lesson's data is stale: {relative} was last written by a launch of scripts/{script}, not by "
               f"the lesson's scripts/{lesson_script_name}.",
               f"{again} Give your own launches a folder of their own (e.g. `--out runs/<exercise>`).")
    world = _int(record.get("nproc")) * max(_int(record.get("nnodes")), 1)
    ex.require(nproc is None or world == nproc,
               f"the lesson's data is stale: {relative} was last written by a {world}-process launch of "
               f"scripts/{script}, not by the lesson's {nproc}-process launch.",
               f"{again} Give your own launches a folder of their own (e.g. `--out runs/<exercise>`).")
    ex.require(record.get("ok") is True,
               f"the lesson's data is incomplete: the last launch into {relative} failed.", again)
    return record


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
