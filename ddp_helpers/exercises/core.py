"""What every check shares: the failure, the comparison rules, the hints and the short tracebacks.

A check function is decorated with :func:`check` and starts with its :class:`Exercise`::

    @check
    def check_02_1(*, padded_len: Answer[int], ...) -> None:
        ex = Exercise("02.1")
        ex.given(padded_len=padded_len, ...)   # the starter's `...` fails first
        ex.require(padded_len == 3, "`padded_len` is wrong.", "a hint that does not give the answer.")
        ex.correct()                           # prints "Exercise 02.1: correct"
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from types import EllipsisType, TracebackType
from typing import Any, NoReturn, ParamSpec, TypeVar, Union

REL_TOL = 1e-9   # closed-form arithmetic (alpha-beta models, byte counts in floats)
ATOL = 1e-6      # float32 tensors computed two ways in the same process

T = TypeVar("T")
P = ParamSpec("P")
# A learner's name as the check cell passes it: the kind of value the exercise asks for, or the
# starter's `...`. The checks test the value, not its type, so anything else fails with a hint.
Answer = Union[T, EllipsisType]  # a generic alias: Answer[int] is int | EllipsisType

STILL_ELLIPSIS_HINT = "replace the `...` in the cell above with your code, run it, then run this check again."
NONE_HINT = "did a function forget to `return` its result?"


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says what and gives a hint."""

    def __init__(self, exercise: str, what: str, hint: str) -> None:
        self.exercise, self.what, self.hint = exercise, what, hint
        super().__init__(f"Exercise {exercise}: {what}\nHint: {hint}")

    def _render_traceback_(self) -> list[str]:  # IPython: show only the message, not this package's frames
        return [f"CheckFailed: {self}"]


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

    def correct(self) -> None:
        print(f"Exercise {self.id}: correct")


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


def check(fn: Callable[P, None]) -> Callable[P, None]:
    """A check function whose exceptions leave without this package's frames.

    IPython and pytest then show a short traceback that ends at the check cell (or at the learner's
    function that raised); IPython renders a :class:`CheckFailed` as its one-line message.
    """

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            error.__traceback__ = _without_package_frames(error.__traceback__,
                                                         keep_innermost=not isinstance(error, CheckFailed))
            raise  # a bare raise adds no frame: the traceback continues at the caller

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

