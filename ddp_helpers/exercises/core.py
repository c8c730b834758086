"""What every check shares: the failure, the comparison rules, the hints and the short tracebacks.

A check function is decorated with :func:`check` and starts with its :class:`Exercise`::

    @check
    def check_02_1(*, padded_len: Answer[int], ...) -> None:
        ex = Exercise("02.1")
        ex.given(padded_len=padded_len, ...)   # the starter's `...` fails first
        ex.require(padded_len == 3, "`padded_len` is wrong.", "a hint that does not give the answer.")
        ex.correct()                           # prints "✓ Exercise 02.1: correct"
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import numbers as _numbers
import os
import re
import shlex
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from types import EllipsisType, TracebackType
from typing import Any, NoReturn, ParamSpec, TypeVar, Union

import numpy as np
import torch

REL_TOL = 1e-9   # closed-form arithmetic (alpha-beta models, byte counts in floats)
ATOL = 1e-6      # float32 tensors computed two ways in the same process
F32_REL_TOL = 1e-6  # a float32 answer: a few roundings of float32's epsilon (1.2e-7)
F32_ATOL = 1e-5  # float32 tensors of size ~1 summed in another order (tens of roundings of 1.2e-7)

T = TypeVar("T")
P = ParamSpec("P")
# A learner's name as the check cell passes it: the kind of value the exercise asks for, or the
# starter's `...`. The checks test the value, not its type, so anything else fails with a hint.
Answer = Union[T, EllipsisType]  # a generic alias: Answer[int] is int | EllipsisType

STILL_ELLIPSIS_HINT = "replace the `...` in the cell above with your code, run it, then run this check again."
NONE_HINT = "did a function forget to `return` its result?"
BROKE_HINT = ("compare the type and shape of each name with what the exercise asks for (a number, a list, "
              "a tensor, a function...), fix it, then run this check again.")


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says what and gives a hint."""

    def __init__(self, exercise: str, what: str, hint: str) -> None:
        self.exercise, self.what, self.hint = exercise, what, hint
        super().__init__(f"Exercise {exercise}: {what}\nHint: {hint}")

    def markdown(self) -> str:
        """The message as Markdown: the names in backticks render as code in JupyterLab."""
        return f"**✗ Exercise {self.exercise}:** {self.what}\n\n**Hint:** {self.hint}"

    def _render_traceback_(self) -> list[str]:  # IPython: show only the message, not this package's frames
        if _show_markdown(self):  # a notebook: the hint was shown as Markdown just above
            return [f"CheckFailed: Exercise {self.exercise} is not correct yet (hint above)."]
        return [f"CheckFailed: {self}"]


def _show_markdown(error: CheckFailed) -> bool:
    """In a Jupyter kernel, display the failure as Markdown (once) and say so; elsewhere (a terminal,
    pytest, nbval) do nothing: there the plain message is the whole story."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return False
    if not getattr(error, "_shown", False):
        from IPython.display import display

        display({"text/markdown": error.markdown(), "text/plain": str(error)}, raw=True)
        error._shown = True
    return True


# --- one exercise's check ------------------------------------------------------------------------

class Exercise:
    """The check of one exercise: every failure it raises names the exercise."""

    def __init__(self, exercise_id: str) -> None:
        self.id = exercise_id

    def fail(self, what: str, hint: str) -> NoReturn:
        raise CheckFailed(self.id, what, hint)

    def require(self, condition: object, what: str, hint: str) -> None:
        if not condition:
            self.fail(what, hint)

    def given(self, **names: object) -> None:
        """Every name is set: not ``...`` (the starter) and not None."""
        for name, value in names.items():
            if value is ...:
                self.fail(f"`{name}` is still `...`.", STILL_ELLIPSIS_HINT)
            if value is None:
                self.fail(f"`{name}` is None.", NONE_HINT)
            if is_ours(value):
                self.fail(f"`{name}` is one of the checks' own helpers, not your answer.",
                          "write the answer yourself in the exercise cell.")

    def function(self, name: str, value: object) -> None:
        """The learner's ``name`` is a function."""
        self.require(callable(value), f"`{name}` is not a function.", f"define it with `def {name}(...):`.")

    def launched(self, name: str, result: object, nproc: int) -> None:
        """The learner's ``name`` is what ``torchrun(...)`` returns, for a launch of ``nproc`` processes."""
        self.require(is_launch(result), f"`{name}` is not what `torchrun(...)` returns.",
                     f"assign the result of the launch: `{name} = torchrun(...)`.")
        ran = processes(result)
        self.require(ran == nproc, f"`{name}` ran {ran} process(es), the exercise asks for {nproc}.",
                     "look at the `nproc=` argument of the launch.")

    def every_rank(self, name: str, result: Any, nproc: int) -> None:
        """Every rank 0..nproc-1 of the launch printed something (a silent script fails)."""
        stdout = result.stdout
        silent = [r for r in range(nproc) if not stdout.get(r)]
        self.require(not silent, f"rank {silent[0] if silent else 0} of `{name}` printed nothing.",
                     "every rank must print its result; look at the script's print calls.")

    def script_of(self, name: str, command_or_args: object, expected: str) -> Path:
        """The worker script a launch ran (from its command or its argument list), which must be
        ``expected`` (a file name), found beside the notebook."""
        path = script_in(command_or_args, expected)
        self.require(path is not None, f"`{name}` did not run {expected}.",
                     f"launch the exercise's script, scripts/{expected}.")
        found = find_file(path)
        self.require(found is not None, f"the script {path} that `{name}` ran cannot be found.",
                     "run the cell that writes the script, from the notebook's folder.")
        return found

    def tree_of(self, script: Path) -> ast.Module:
        """The script's syntax tree."""
        try:
            return ast.parse(Path(script).read_text())
        except (OSError, SyntaxError, ValueError):
            self.fail(f"{Path(script).name} does not parse as Python.", "run its cell again and read the error.")

    def correct(self) -> None:
        """One line, the same on every machine (stored outputs are compared)."""
        print(f"✓ Exercise {self.id}: correct")


# --- short tracebacks ----------------------------------------------------------------------------

def _package_frame(tb: TracebackType) -> bool:
    return tb.tb_frame.f_globals.get("__name__", "").startswith(__package__ + ".")


def _without_package_frames(tb: TracebackType | None, keep_innermost: bool) -> TracebackType | None:
    """A copy of the traceback without the frames of this package (the learner's own frames stay).

    With ``keep_innermost`` the innermost frame stays even if it is ours: where a check itself broke.
    """
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    head = None
    for i, entry in reversed(list(enumerate(entries))):
        if not _package_frame(entry) or (keep_innermost and i == len(entries) - 1):
            head = TracebackType(head, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return head


def _exercise_of(fn: Callable[..., object]) -> str:
    return fn.__name__.removeprefix("check_").replace("_", ".")


def _innermost_is_ours(tb: TracebackType | None) -> bool:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and _package_frame(last)


def check(fn: Callable[P, None]) -> Callable[P, None]:
    """A check function whose exceptions leave without this package's frames.

    IPython and pytest then show a short traceback that ends at the check cell (or at the learner's
    function that raised); IPython renders a :class:`CheckFailed` as its one-line message. An error
    that a learner's value causes inside the check itself (a wrong type, a missing key) becomes a
    :class:`CheckFailed` with a hint: the check's source never shows. The wrapper keeps no
    ``__wrapped__``, so ``check_NN_k??`` in IPython shows this wrapper, not the check's body.
    """
    exercise = _exercise_of(fn)

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            return fn(*args, **kwargs)
        except CheckFailed as error:
            error.__traceback__ = _without_package_frames(error.__traceback__, keep_innermost=False)
            raise
        except Exception as error:
            if _innermost_is_ours(error.__traceback__):  # the check broke on a value: say so, hide the source
                failed = CheckFailed(exercise, f"your answer could not be checked: it raised {type(error).__name__} "
                                               "inside the check.", BROKE_HINT)
                try:
                    raise failed from None
                except CheckFailed as converted:
                    converted.__traceback__, converted.__context__ = None, None
                    raise  # without a frame of ours: the traceback starts at the check cell
            # the learner's own function raised: show its frames, not ours
            error.__traceback__ = _without_package_frames(error.__traceback__, keep_innermost=False)
            raise  # a bare raise adds no frame: the traceback continues at the caller

    try:  # evaluated here: without __wrapped__, typing would look the names up in this module
        run.__annotations__ = typing.get_type_hints(fn)
    except (NameError, TypeError):
        run.__annotations__ = dict(fn.__annotations__)
    run.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    del run.__wrapped__  # type: ignore[attr-defined]
    run.check_body = fn  # type: ignore[attr-defined]  # for the tests
    return run


# --- comparison rules ----------------------------------------------------------------------------

def same_numbers(a: object, b: object, rel_tol: float = REL_TOL) -> bool:
    """Two numbers agree to ``rel_tol`` (False when one is not a number)."""
    try:
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


def as_int_list(values: Any) -> list[int] | None:
    """The values as sorted ints, for comparing sets given as lists, tuples or sets (None if not ints)."""
    try:
        return sorted(int(v) for v in values)
    except (TypeError, ValueError):
        return None


def numbers(line: str) -> list[float]:
    """Every number printed in a line."""
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line)]


# --- launches ------------------------------------------------------------------------------------

def is_launch(result: object) -> bool:
    """``result`` looks like what ``torchrun(...)`` returns."""
    return isinstance(getattr(result, "stdout", None), dict) and isinstance(getattr(result, "command", None), str)


def processes(result: Any) -> int:
    """How many processes a launch ran: --nproc-per-node (times --nnodes) of its command."""
    per_node = re.search(r"--nproc[-_]per[-_]node[= ](\d+)", result.command or "")
    nodes = re.search(r"--nnodes[= ](\d+)", result.command or "")
    if per_node is None:
        return len(result.stdout)
    return int(per_node.group(1)) * (int(nodes.group(1)) if nodes else 1)



# --- values in any valid form ---------------------------------------------------------------------

def is_ours(value: object) -> bool:
    """``value`` is a function or class of this package (a reference helper given as an answer)."""
    module = getattr(value, "__module__", None)
    return (callable(value) and isinstance(module, str) and module.startswith(__package__ + ".")
            and not isinstance(value, type))


def number(value: object) -> float | None:
    """A real number as float: int, float, numpy scalar, a one-element array or tensor (None otherwise; bools too)."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, torch.Tensor | np.ndarray):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size != 1 or value.dtype in (torch.bool, np.bool_) or getattr(value, "is_complex", lambda: False)():
            return None
        value = value.reshape(()).item() if isinstance(value, torch.Tensor) else value.reshape(()).item()
    if isinstance(value, _numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def integer(value: object) -> int | None:
    """A whole number as int: any :func:`number` form with no fractional part (3.0 counts as 3)."""
    if isinstance(value, _numbers.Integral) and not isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        return int(value.reshape(()).item())
    x = number(value)
    return int(x) if x is not None and math.isfinite(x) and x == int(x) else None


def sequence(value: object) -> list | None:
    """The items of a list, tuple, ``torch.Size``, 1-d (or more) array or tensor (None otherwise)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return list(value) if value.ndim >= 1 else None
    if isinstance(value, list | tuple):
        return list(value)
    return None


def _each(value: object, convert: Callable[[object], T | None]) -> list[T] | None:
    """Every item of a sequence converted, or None if it is no sequence or an item does not convert."""
    items = sequence(value)
    out = None if items is None else [convert(v) for v in items]
    return None if out is None or any(v is None for v in out) else out  # type: ignore[return-value]


def number_list(value: object) -> list[float] | None:
    return _each(value, number)


def integer_list(value: object) -> list[int] | None:
    return _each(value, integer)


def is_float32(value: object) -> bool:
    """The value was computed in float32 (a numpy or torch float32 scalar or array)."""
    dtype = getattr(value, "dtype", None)
    return dtype in (np.float32, torch.float32, torch.bfloat16, torch.float16) or isinstance(value, np.float32)


def rel_tol_for(value: object, rel_tol: float = REL_TOL) -> float:
    """The relative tolerance for an answer: float32 answers get float32's."""
    return max(rel_tol, F32_REL_TOL) if is_float32(value) else rel_tol


def close(value: object, truth: float, rel_tol: float = REL_TOL, abs_tol: float = 0.0) -> bool:
    """``value`` in any number form is ``truth`` to the tolerance of its dtype."""
    x = number(value)
    return x is not None and math.isclose(x, truth, rel_tol=rel_tol_for(value, rel_tol), abs_tol=abs_tol)


def by_rank(value: object) -> list | None:
    """Per-rank results as a list in rank order: a list or tuple (rank order) or a dict keyed by rank."""
    if isinstance(value, dict):
        keys = {integer(k) if not isinstance(k, str) else (int(k) if k.isdigit() else None) for k in value}
        if None in keys or keys != set(range(len(value))):
            return None
        return [v for _, v in sorted(((int(k), v) for k, v in value.items()), key=lambda kv: kv[0])]
    return sequence(value)


# --- files and scripts beside the notebook --------------------------------------------------------

def _running_notebook_folder() -> list[Path]:
    """The running notebook's folder when the front end names it, else nothing: Jupyter's server sets
    JPY_SESSION_NAME to its path; VS Code sets none (microsoft/vscode-jupyter#16291) but puts the path
    in the kernel's global __vsc_ipynb_file__ (microsoft/vscode-jupyter#8531)."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    if not session.endswith(".ipynb"):
        shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
        session = str(getattr(shell, "user_ns", {}).get("__vsc_ipynb_file__", ""))
    return [Path(session).parent] if session.endswith(".ipynb") else []


def notebook_folders() -> list[Path]:
    """Where a learner's relative paths (scripts, their own run folders) may start: the running notebook's
    folder, the working directory, then the series' notebooks/."""
    from ddp_helpers.series import NOTEBOOK_DIR

    return [*_running_notebook_folder(), Path.cwd(), NOTEBOOK_DIR]


def lesson_folders() -> list[Path]:
    """Where the lesson's own launches wrote their runs: the running notebook's folder, else the series'
    notebooks/; never the working directory."""
    from ddp_helpers.series import NOTEBOOK_DIR

    return _running_notebook_folder() or [NOTEBOOK_DIR]


def _first_file(relative: Path, folders: list[Path]) -> Path | None:
    return next((folder / relative for folder in folders if (folder / relative).is_file()), None)


def run_file(ex: Exercise, relative: str | os.PathLike, launch: str) -> Path:
    """A file that the lesson's launch ``launch`` (e.g. "the launch of section 2") wrote under the
    notebook's folder; a CheckFailed naming that launch when it is missing."""
    found = _first_file(Path(relative), lesson_folders())
    if found is None:
        ex.fail(f"{relative} does not exist, so there is no recorded run to check against.",
                f"run {launch} first, then this check again.")
    return found


def run_json(ex: Exercise, relative: str | os.PathLike, launch: str) -> Any:
    """The JSON a lesson's launch wrote (see :func:`run_file`)."""
    import json

    try:
        return json.loads(run_file(ex, relative, launch).read_text())
    except (OSError, ValueError):
        ex.fail(f"{relative} cannot be read as JSON.", f"run {launch} again, then this check.")


def find_file(path: str | os.PathLike) -> Path | None:
    """``path`` itself when absolute, else the first notebook folder that holds it."""
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


# --- lesson state missing after a kernel restart --------------------------------------------------

_CHECK_CALL = re.compile(r"\bexercises\.check_(\d\d)_(\d+)\s*\(")


def missing_name_failure(error: NameError, cell_source: str) -> CheckFailed | None:
    """The hint for a check cell whose call names a result that is not defined (the kernel restarted,
    or the cells that make it were not run); None when ``cell_source`` calls no check."""
    m = _CHECK_CALL.search(cell_source or "")
    if m is None:
        return None
    name = getattr(error, "name", None) or "a name"
    # a check cell passes only the exercise's own names (tests/test_exercises_runs.py holds every notebook
    # to that): the lesson's results are read by the check itself
    hint = f"`{name}` is made by the exercise's cell just above this check: run it first, then this check again."
    return CheckFailed(f"{m.group(1)}.{m.group(2)}", f"`{name}` is not defined, so this check cannot run.", hint)


def _cell_source(tb: TracebackType | None) -> str:
    """The source of a traceback entry's file, the cell when it is one (IPython keeps cells in linecache)."""
    import linecache

    if tb is None or _package_frame(tb):
        return ""
    return "".join(linecache.getlines(tb.tb_frame.f_code.co_filename))


def install_missing_name_hint() -> None:
    """In IPython, show a NameError raised by a check cell's own line as a :class:`CheckFailed` hint.

    The handler joins any custom exception handler already installed (the launcher's); other
    NameErrors keep IPython's own display. Called each time a check is looked up, since the launcher
    installs its own handler again when it runs.
    """
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is None or NameError in getattr(shell, "custom_exceptions", ()):
        return
    before, previous = tuple(shell.custom_exceptions), getattr(shell, "CustomTB", None)

    def handler(shell: Any, etype: type, value: BaseException, tb: TracebackType | None,
                tb_offset: int | None = None) -> None:
        if issubclass(etype, NameError) and tb is not None:
            failure = missing_name_failure(value, _cell_source(_walk(tb)[-1]))  # type: ignore[arg-type]
            if failure is not None:  # the check cell's own line named it
                shell.showtraceback((CheckFailed, failure, None))
                return None
        if before and issubclass(etype, before) and previous is not None:
            previous(etype, value, tb, tb_offset)
            return None
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None

    shell.set_custom_exc((*before, NameError), handler)


def _walk(tb: TracebackType | None) -> list[TracebackType]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out
