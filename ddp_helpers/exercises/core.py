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
import types
import typing
from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence, ValuesView
from decimal import Decimal
from fractions import Fraction
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


# --- comparison rules ----------------------------------------------------------------------------

def same_numbers(a: object, b: object, rel_tol: float = REL_TOL) -> bool:
    """Two numbers agree to ``rel_tol`` (False when one is not a number)."""
    try:
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


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
#
# One rule for every check: a value counts in any form a learner may reasonably hold it in.
# - a number: int, float, Fraction, Decimal, a numpy scalar, a one-element array or tensor, or a string that
#   parses as one ("3", "0.25", "15/8"); never a bool;
# - a whole number: any number form with no fractional part ("3", 3.0, torch.tensor(3));
# - a sequence: a list, tuple, torch.Size, range, array or tensor (1-d or more), a set (sorted), or a dict
#   keyed by rank 0..n-1 (its values in rank order);
# - a flat list of numbers (number_list, integer_list): any sequence, nested lists flattened;
# - per-rank lists (per_rank): compared structurally, each rank's entry converted on its own;
# - a float32 (or half) value gets float32's tolerance (rel_tol_for, close).

def is_ours(value: object) -> bool:
    """``value`` is a function or class of this package (a reference helper given as an answer)."""
    module = getattr(value, "__module__", None)
    return (callable(value) and isinstance(module, str) and module.startswith(__package__ + ".")
            and not isinstance(value, type))


def _parse_number(text: str) -> float | int | None:
    """A string that reads as a number ("3", " 0.25 ", "1e-3", "15/8"), as int when it is a whole number."""
    text = text.strip().replace("_", "")
    if not text or len(text) > 64:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        pass
    try:
        return float(text)  # "inf", "nan"
    except ValueError:
        return None


def number(value: object) -> float | None:
    """A real number as float in any :ref:`valid form <values in any valid form>` (None otherwise; bools too)."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, str):
        parsed = _parse_number(value)
        return None if parsed is None else float(parsed)
    if isinstance(value, torch.Tensor | np.ndarray):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size != 1 or value.dtype in (torch.bool, np.bool_) or getattr(value, "is_complex", lambda: False)() \
                or (isinstance(value, np.ndarray) and not np.issubdtype(value.dtype, np.number)):
            return None
        value = value.reshape(()).item()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, _numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def integer(value: object) -> int | None:
    """A whole number as int: any :func:`number` form with no fractional part (3.0 and "3" count as 3)."""
    if isinstance(value, _numbers.Integral) and not isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, str):
        parsed = _parse_number(value)
        if isinstance(parsed, int):
            return parsed
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool and not value.is_complex():
        return int(value.reshape(()).item())
    x = number(value)
    return int(x) if x is not None and math.isfinite(x) and x == int(x) else None


def _rank_keys(value: Mapping) -> list[int] | None:
    """The keys of a dict keyed by rank (ints or digit strings: 0, "0", "rank0") if they are 0..n-1."""
    keys = []
    for k in value:
        k = re.sub(r"^rank[ _]?", "", k.strip(), flags=re.I) if isinstance(k, str) else k
        keys.append(integer(k) if not isinstance(k, float) else None)
    return keys if None not in keys and sorted(keys) == list(range(len(value))) else None  # type: ignore[type-var]


def sequence(value: object) -> list | None:
    """The items of a list, tuple, ``torch.Size``, range, array or tensor (1-d or more), a set (sorted when its
    items sort) or a dict keyed by rank 0..n-1 (its values in rank order); None otherwise (a string too)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return list(value) if value.ndim >= 1 else None
    if isinstance(value, list | tuple | range | KeysView | ValuesView):
        return list(value)
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, Mapping):
        keys = _rank_keys(value)
        return None if keys is None else [v for _, v in sorted(zip(keys, value.values(), strict=True),
                                                               key=lambda kv: kv[0])]
    return None


def flat(value: object) -> list | None:
    """The leaves of a sequence whose items may be sequences themselves (``[[1, 2], (3,)]`` -> ``[1, 2, 3]``);
    a tensor or array of any shape gives its values; None for no sequence."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return list(value.reshape(-1)) if value.ndim >= 1 else None
    items = sequence(value)
    if items is None:
        return None
    out: list = []
    for item in items:
        inner = flat(item) if not isinstance(item, str) else None
        if inner is None:
            out.append(item)
        else:
            out.extend(inner)
    return out


def _each(items: list | None, convert: Callable[[object], T | None]) -> list[T] | None:
    """Every item converted, or None if there are no items or one does not convert."""
    out = None if items is None else [convert(v) for v in items]
    return None if out is None or any(v is None for v in out) else out  # type: ignore[return-value]


def number_list(value: object) -> list[float] | None:
    """A flat list of numbers in any valid form (nested lists flattened), None when an item is no number."""
    return _each(flat(value), number)


def integer_list(value: object) -> list[int] | None:
    """A flat list of whole numbers in any valid form (nested lists flattened)."""
    return _each(flat(value), integer)


def per_rank(value: object, convert: Callable[[object], T | None]) -> list[T] | None:
    """Per-rank entries compared structurally: a sequence or a dict keyed by rank, each entry converted by
    ``convert`` (e.g. :func:`integer_list`); None when one does not convert."""
    return _each(by_rank(value), convert)


def as_int_list(values: Any) -> list[int] | None:
    """A set of whole numbers given as a list, tuple, set, array or tensor (nested lists flattened), or as
    counts (a dict {item: how many}: the items counted at least once), sorted; None if not whole numbers."""
    if isinstance(values, Mapping) and not isinstance(values, str):
        counts = [(integer(k), number(v)) for k, v in values.items()]
        if any(k is None or c is None for k, c in counts):
            return None
        return sorted(k for k, c in counts if c > 0)  # type: ignore[operator, type-var]
    got = integer_list(values)
    return None if got is None else sorted(got)


def is_float32(value: object) -> bool:
    """The value was computed in float32 or less (a numpy or torch float32/half scalar or array, or a
    sequence of them)."""
    dtype = getattr(value, "dtype", None)
    if dtype in (np.float32, np.float16, torch.float32, torch.bfloat16, torch.float16) \
            or isinstance(value, np.float32 | np.float16):
        return True
    items = sequence(value) if isinstance(value, list | tuple) else None
    return bool(items) and any(is_float32(v) for v in items)  # type: ignore[union-attr]


def _float32_valued(value: object) -> bool:
    """A Python float that a float32 computation gave (``tensor.item()`` of a float32 tensor): a non-zero value
    that float32 holds exactly. A float64 result with a fractional part almost never is one."""
    x = number(value) if isinstance(value, float) else None
    return x is not None and math.isfinite(x) and x != int(x) and float(np.float32(x)) == x


def rel_tol_for(value: object, rel_tol: float = REL_TOL) -> float:
    """The relative tolerance for an answer: float32 answers (float32 arrays and tensors, and Python floats that
    a float32 computation gave) get float32's."""
    return max(rel_tol, F32_REL_TOL) if is_float32(value) or _float32_valued(value) else rel_tol


def abs_tol_for(value: object, abs_tol: float = 0.0) -> float:
    """The absolute tolerance for an answer: float32 answers get at least ATOL (a float32 sum of values of
    size ~1 rounds at ~1e-7 each)."""
    return max(abs_tol, ATOL) if (is_float32(value) or _float32_valued(value)) and abs_tol > 0 else abs_tol


def close(value: object, truth: float, rel_tol: float = REL_TOL, abs_tol: float = 0.0) -> bool:
    """``value`` in any number form is ``truth`` to the tolerance of its dtype."""
    x = number(value)
    return x is not None and math.isclose(x, truth, rel_tol=rel_tol_for(value, rel_tol),
                                          abs_tol=abs_tol_for(value, abs_tol))


def by_rank(value: object) -> list | None:
    """Per-rank results as a list in rank order: a list or tuple (rank order) or a dict keyed by rank."""
    return sequence(value)


def key_number(key: object) -> float | None:
    """A dict key that names a number in any form: 0.5, "0.5", or a label around one number ("0.5 MiB",
    "DDP cap 0.5"); None otherwise."""
    x = number(key)
    if x is None and isinstance(key, str):
        found = numbers(key)
        x = found[0] if len(found) == 1 else None
    return x


def key_name(key: object) -> str:
    """A dict key as a name, spelled one way: "All-Gather", "all gather" and "all_gather" alike."""
    return re.sub(r"[^0-9a-z]+", "_", str(key).strip().lower()).strip("_")


def without_zeros(counts: Mapping) -> dict:
    """A dict of counts without its explicit zero entries ({"a": 3, "b": 0} is {"a": 3})."""
    return {k: v for k, v in counts.items() if number(v) != 0}


def path(value: object) -> Path | None:
    """A path given as a string or a pathlib.Path (os.PathLike); None for anything else (an open file, a number)."""
    if isinstance(value, str) and value.strip():
        return Path(value.strip())
    if isinstance(value, os.PathLike):
        return Path(value)
    return None


def tensor(value: object) -> torch.Tensor | None:
    """A tensor from a tensor, an array or a (nested) list of numbers; None otherwise."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, str | bytes | Mapping) or value is None:
        return None
    try:
        out = torch.as_tensor(np.asarray(value, dtype=np.float64) if not isinstance(value, np.ndarray) else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return out if out.dtype not in (torch.bool,) and not out.is_complex() else None


def call(fn: Callable[..., T], *args: object) -> T:
    """A learner's function called with the exercise's arguments: positionally, or by its own parameter names
    when it takes them as keywords only (``def f(*, items, cap)``)."""
    try:
        sig = inspect.signature(fn)
        sig.bind(*args)
    except TypeError:
        named = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        keywords = {p.name: a for p, a in zip(named, args, strict=False)}
        try:
            if len(keywords) != len(args):
                raise TypeError
            sig.bind(**keywords)
        except TypeError:
            return fn(*args)  # the learner's own TypeError, raised by their function's call
        return fn(**keywords)
    except ValueError:  # a builtin without a signature
        pass
    return fn(*args)


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


def run_file(ex: Exercise, relative: str | os.PathLike, launch: str) -> Path:
    """A file that the lesson's launch ``launch`` (e.g. "the launch of section 2") wrote under the
    notebook's folder; a CheckFailed naming that launch and the folders searched when it is missing."""
    folders = lesson_folders()
    found = _first_file(Path(relative), folders)
    if found is None:
        ex.fail(f"{relative} does not exist in {where_looked(folders)}, so there is no recorded run to check "
                "against.",
                f"run {launch} first (in this notebook, from its own folder), then this check again.")
    return found


def run_json(ex: Exercise, relative: str | os.PathLike, launch: str) -> Any:
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
