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
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import EllipsisType, TracebackType
from typing import Any, NoReturn, ParamSpec, TypeVar, Union

import numpy as np
import torch

from ddp_helpers.exercises.folders import (  # noqa: F401  re-exported: the checks import them from core
    caller_namespace,
    caller_values,
    calls,
    find_file,
    flag,
    launches_in,
    lesson_folders,
    notebook_folders,
    readable,
    run_file,
    run_json,
    script_in,
    where_looked,
)
from ddp_helpers.exercises.values import (  # noqa: F401  re-exported: the checks import them from core
    ATOL,
    F32_ATOL,
    F32_REL_TOL,
    REL_TOL,
    abs_tol_for,
    as_int_list,
    by_rank,
    call,
    close,
    flat,
    integer,
    integer_list,
    is_float32,
    is_ours,
    key_among,
    key_name,
    key_number,
    key_size,
    keys_among,
    number,
    number_list,
    numbers,
    path,
    per_rank,
    rel_tol_for,
    same_numbers,
    sequence,
    tensor,
    without_zeros,
)

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

    def every_rank(self, name: str, result: Any, nproc: int) -> None:
        """Every rank 0..nproc-1 of the launch printed something (a silent script fails)."""
        stdout = result.stdout
        silent = [r for r in range(nproc) if not stdout.get(r)]
        self.require(not silent, f"rank {silent[0] if silent else 0} of `{name}` printed nothing.",
                     "every rank must print its result; look at the script's print calls.")

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


def check(fn: Callable[P, None]) -> Callable[P, None]:
    """A check function whose exceptions leave without this package's frames.

    IPython and pytest then show a short traceback that ends at the check cell (or at the learner's
    function that raised); IPython renders a :class:`CheckFailed` as its one-line message. An error
    that a learner's value causes inside the check itself (a wrong type, a missing key) becomes a
    :class:`CheckFailed` with a hint: the check's source never shows. The wrapper keeps no
    ``__wrapped__``, so ``check_NN_k??`` in IPython shows this wrapper, not the check's body.
    """
    exercise = _exercise_of(fn)

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:  # the check cell was changed: a name it does not take, or a name missing
            raise CheckFailed(exercise, f"the check cell's call does not fit this check ({error}).",
                              f"pass exactly the names of the check cell as written: "
                              f"{', '.join(f'`{n}`' for n in signature.parameters)}.") from None
        try:
            return fn(*args, **kwargs)
        except CheckFailed as error:
            error.__traceback__ = _without_package_frames(error.__traceback__, keep_innermost=False)
            raise
        except Exception as error:
            if not _learners_code_raised(error.__traceback__, fn):  # the check broke on a value: say so, hide the source
                failed = _converted(exercise, fn, dict(kwargs), error)
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
    run.__signature__ = signature  # type: ignore[attr-defined]
    del run.__wrapped__  # type: ignore[attr-defined]
    run.check_body = fn  # type: ignore[attr-defined]  # for the tests
    return run


# --- the form each argument asks for, from the check's annotations --------------------------------

_FORMS: dict[str, str] = {
    "LaunchResult": "what `torchrun(...)` returns",
    "CompletedProcess": "what `subprocess.run(...)` returns",
    "WorkerFailed": "the `WorkerFailed` exception the launch raised",
    "Module": "a model (a `torch.nn.Module`)",
    "Tensor": "a tensor",
    "GradScaler": "a `torch.amp.GradScaler`",
    "EvalResult": "an `EvalResult`",
}


def _args_of(annotation: object) -> tuple:
    return typing.get_args(annotation)


def _is_union(annotation: object) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def _options(annotation: object) -> list:
    """The forms a (union) annotation allows, without the starter's `...` and None."""
    if _is_union(annotation):
        return [a for o in _args_of(annotation) for a in _options(o)]
    return [] if annotation in (EllipsisType, type(None), None) else [annotation]


def form_of(annotation: object) -> str:
    """An annotation in words: Answer[int] -> "a whole number", Answer[str | Path] -> "a path"."""
    options = _options(annotation)
    if {o for o in options} >= {str, Path} or options == [Path]:
        return "a path (a string or a pathlib.Path)"
    if len(options) != 1:
        words = list(dict.fromkeys(form_of(o) for o in options))
        return " or ".join(words) if words else "the value the exercise asks for"
    ann = options[0]
    origin = typing.get_origin(ann) or ann
    args = _args_of(ann)
    if ann is bool:
        return "True or False"
    if ann is int:
        return "a whole number"
    if ann is float:
        return "a number"
    if ann is str:
        return "a string"
    if origin in (list, tuple, set, frozenset, Sequence, Iterable):
        inner = form_of(args[0]) if args and args[0] is not Ellipsis else ""
        plural = {"a whole number": "whole numbers", "a number": "numbers", "a string": "strings",
                  "a tensor": "tensors", "True or False": "True/False values"}.get(inner)
        if plural is None and inner.startswith(("a list of", "a dict")):
            plural = inner.replace("a list of", "lists of", 1).replace("a dict", "dicts", 1)
        return f"a list of {plural}" if plural else "a list"
    if origin in (dict, Mapping):
        return "a dict"
    if origin is Callable:
        return "a function"
    name = getattr(ann, "__name__", "")
    if name in _FORMS:
        return _FORMS[name]
    return f"a `{name}`" if name and name != "Any" else "the value the exercise asks for"


def fits(value: object, annotation: object) -> bool:
    """``value`` has a valid form of ``annotation`` (roughly: used to name the argument that broke a check)."""
    options = _options(annotation)
    if len(options) != 1:
        return any(fits(value, o) for o in options) if options else True
    ann = options[0]
    origin = typing.get_origin(ann) or ann
    args = _args_of(ann)
    if ann is Any or isinstance(ann, TypeVar):
        return True
    if ann is bool:
        return isinstance(value, bool | np.bool_)
    if ann is int:
        return integer(value) is not None
    if ann is float:
        return number(value) is not None
    if ann is str:
        return isinstance(value, str)
    if ann is Path:
        return path(value) is not None
    if origin in (list, tuple, set, frozenset, Sequence, Iterable):
        items = sequence(value)
        if items is None:
            return False
        if args and args[0] is not Ellipsis and args[0] in (int, float):
            return (integer_list if args[0] is int else number_list)(value) is not None
        return not args or args[0] is Ellipsis or all(fits(v, args[0]) for v in items)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if origin is Callable:
        return callable(value)
    if ann is torch.Tensor:
        return isinstance(value, torch.Tensor | np.ndarray)
    if isinstance(origin, type):
        name = origin.__name__
        if name == "LaunchResult":
            return is_launch(value)
        return isinstance(value, origin) or (name == "CompletedProcess" and hasattr(value, "returncode"))
    return True


def _describe(value: object) -> str:
    """A value's kind in words, for a message: "None", "an int", "an open file", "a list holding None"."""
    if value is None:
        return "None"
    if hasattr(value, "read") and hasattr(value, "close"):
        return "an open file object"
    items = sequence(value) if isinstance(value, list | tuple) else None
    if items is not None and any(v is None for v in items):
        return f"a {type(value).__name__} holding None at position {next(i for i, v in enumerate(items) if v is None)}"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _misfit(fn: Callable[..., object], kwargs: dict[str, object]) -> tuple[str, str] | None:
    """The first keyword argument whose value has no valid form of its annotation: (name, form)."""
    hints = getattr(fn, "_forms", None)
    if hints is None:
        try:
            hints = typing.get_type_hints(fn)
        except (NameError, TypeError):
            hints = {}
    for name, value in kwargs.items():
        if name in hints and value is not ... and not fits(value, hints[name]):
            return name, form_of(hints[name])
    return None


def _forms_line(fn: Callable[..., object], kwargs: dict[str, object]) -> str:
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):
        hints = {}
    return "; ".join(f"`{n}` {form_of(hints[n])}" for n in kwargs if n in hints)


def _broke_on_a_checkpoint(error: BaseException) -> bool:
    """torch.load failed on a file: truncated, empty, or not a torch.save file."""
    import pickle
    import zipfile

    text = str(error)
    frames = [tb.tb_frame.f_globals.get("__name__", "") for tb in _walk(error.__traceback__)]
    return any(f == "torch.serialization" for f in frames) and (
        isinstance(error, EOFError | pickle.UnpicklingError | zipfile.BadZipFile)
        or "PytorchStreamReader" in text or "zip archive" in text or "Ran out of input" in text)


def _library_frame(tb: TracebackType) -> bool:
    """A frame of this series' package, of Python's standard library or of an installed package (torch, numpy)."""
    import sysconfig

    if tb.tb_frame.f_globals.get("__name__", "").startswith("ddp_helpers"):
        return True
    filename = tb.tb_frame.f_code.co_filename
    if filename.startswith("<frozen") or filename.startswith("<string"):
        return True
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(filename.startswith(str(Path(r))) for r in roots if r)


def _learners_code_raised(tb: TracebackType | None, body: Callable[..., object]) -> bool:
    """Some frame after the check's own is the learner's code (a function they wrote that the check called)."""
    own = getattr(body, "__code__", None)
    return any(not _library_frame(entry) and entry.tb_frame.f_code is not own for entry in _walk(tb)[1:])


def _converted(exercise: str, fn: Callable[..., object], kwargs: dict[str, object], error: Exception) -> CheckFailed:
    """The CheckFailed for an error that a learner's value caused inside the check."""
    if _broke_on_a_checkpoint(error):
        return CheckFailed(exercise, "a checkpoint file that the check reads is truncated, empty or not a torch.save "
                                     "file.",
                           "save it again with torch.save and let the save finish, then run this check again.")
    misfit = _misfit(fn, kwargs)
    if misfit is not None:
        name, form = misfit
        return CheckFailed(exercise, f"`{name}` is {_describe(kwargs[name])}; the exercise asks for {form}.",
                           f"make `{name}` {form}, run its cell, then run this check again.")
    forms = _forms_line(fn, kwargs)
    return CheckFailed(exercise, f"your answer could not be checked: it raised {type(error).__name__} inside the "
                                 "check.",
                       BROKE_HINT + (f" The check expects: {forms}." if forms else ""))


# --- launches ------------------------------------------------------------------------------------

def is_launch(result: object) -> bool:
    """``result`` looks like what ``torchrun(...)`` returns."""
    return isinstance(getattr(result, "stdout", None), dict) and isinstance(getattr(result, "command", None), str)


def load_checkpoint(ex: Exercise, file: str | os.PathLike, name: str) -> Any:
    """``torch.load(file, weights_only=True)`` on CPU; a hint naming ``name`` when the file is truncated, empty or
    not a torch.save file."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        ex.fail(f"{name} does not exist.", "save it first (torch.save), then run this check again.")
    except Exception:  # noqa: BLE001 - a truncated zip, an unpickling error, an empty file: all the same to a learner
        ex.fail(f"{name} cannot be read by torch.load: it is truncated or was not written by torch.save.",
                "save it again with torch.save and let the save finish (on every rank that writes it), then run "
                "this check again.")


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
