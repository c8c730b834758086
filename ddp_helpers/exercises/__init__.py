"""Answer checks for the exercises of the series.

Every exercise of a notebook is followed by a check cell (tagged ``check``) that calls one function
of this package with the learner's names, as keywords, for example::

    exercises.check_02_1(padded_len=padded_len, dropped_len=dropped_len, ...)

A check re-derives the truth itself, from torch or from the files the lesson's launch wrote in the
notebook's folder (``runs/...``), and compares: it never takes an expected value, a tolerance or a
record from the check cell. A run that is missing fails with a hint naming the launch to run first.

- On success it prints one line, ``✓ Exercise 02.1: correct``, the same on every machine.
- On a wrong answer, or a name still set to ``...`` (the student starter), it raises
  :class:`CheckFailed` (an ``AssertionError``) whose message names the exercise, says what is wrong
  and gives a hint. It never prints the expected answer.

Floats are compared with the tolerance stated in each check (``REL_TOL``, ``ATOL``, or ``F32_ATOL``
and ``F32_REL_TOL`` for answers computed in float32); integers, lists and strings exactly. An
exception leaves a check without this package's frames, so IPython and pytest show a short
traceback that ends at the check cell; IPython shows a :class:`CheckFailed` as its message alone.

The layout:

- ``core``: :class:`CheckFailed`, :class:`~.core.Exercise` (one exercise's check: ``given``, ``require``,
  ``fail``, ``correct`` and the shared hints) and the ``@check`` decorator that shortens the tracebacks and
  turns a learner's value that breaks a check into a hint; it re-exports what the next two hold.
- ``values``: the tolerances, the comparison rules and the one rule for values in any valid form.
- ``folders``: where a check finds the learner's files and the lesson's runs, in any front end.
- ``provenance``: which launch a result is, of which script, and who last wrote a lesson's run.
- ``nb00`` ... ``nb15``: the checks of one notebook each, ``check_NN_k`` for exercise NN.k, with the
  private reference answers they compare against.

This package re-exports :class:`CheckFailed` and every ``check_NN_k``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

from ddp_helpers.exercises.core import ATOL, REL_TOL, CheckFailed, install_missing_name_hint
from ddp_helpers.exercises.nb00 import check_00_1, check_00_2, check_00_3, check_00_4
from ddp_helpers.exercises.nb01 import check_01_1, check_01_2, check_01_3
from ddp_helpers.exercises.nb02 import check_02_1, check_02_2, check_02_3, check_02_4
from ddp_helpers.exercises.nb03 import check_03_1, check_03_2, check_03_3
from ddp_helpers.exercises.nb04 import check_04_1, check_04_2, check_04_3
from ddp_helpers.exercises.nb05 import check_05_1, check_05_2, check_05_3, check_05_4
from ddp_helpers.exercises.nb06 import check_06_1, check_06_2, check_06_3, check_06_4
from ddp_helpers.exercises.nb07 import check_07_1, check_07_2, check_07_3, check_07_4
from ddp_helpers.exercises.nb08 import check_08_1, check_08_2, check_08_3
from ddp_helpers.exercises.nb09 import check_09_1, check_09_2, check_09_3, check_09_4
from ddp_helpers.exercises.nb10 import check_10_1, check_10_2, check_10_3
from ddp_helpers.exercises.nb11 import check_11_1, check_11_2, check_11_3
from ddp_helpers.exercises.nb12 import check_12_1, check_12_2, check_12_3
from ddp_helpers.exercises.nb13 import check_13_1, check_13_2, check_13_3
from ddp_helpers.exercises.nb14 import check_14_1, check_14_2
from ddp_helpers.exercises.nb15 import check_15_1, check_15_2, check_15_3

# exercise id -> its check: "02.1" -> check_02_1
CHECKS: dict[str, Callable[..., None]] = {
    name[len("check_"):].replace("_", "."): fn for name, fn in sorted(globals().items()) if name.startswith("check_")}


class _Checks(types.ModuleType):
    """This package as a module: looking up ``exercises.check_NN_k`` (which a check cell does before it
    evaluates its arguments) installs the IPython hint for lesson results that are not defined."""

    def __getattribute__(self, name: str) -> object:
        if name.startswith("check_"):
            install_missing_name_hint()
        return super().__getattribute__(name)


sys.modules[__name__].__class__ = _Checks


def exercise_ids() -> list[str]:
    """Every checked exercise, e.g. ``["00.1", "00.2", ...]``."""
    return list(CHECKS)


__all__ = ["ATOL", "CHECKS", "REL_TOL", "CheckFailed", "exercise_ids",
    "check_00_1", "check_00_2", "check_00_3", "check_00_4", "check_01_1", "check_01_2", "check_01_3", "check_02_1",
    "check_02_2", "check_02_3", "check_02_4", "check_03_1", "check_03_2", "check_03_3", "check_04_1",
    "check_04_2", "check_04_3", "check_05_1", "check_05_2", "check_05_3", "check_05_4", "check_06_1",
    "check_06_2", "check_06_3", "check_06_4", "check_07_1", "check_07_2", "check_07_3", "check_07_4",
    "check_08_1", "check_08_2", "check_08_3", "check_09_1", "check_09_2", "check_09_3", "check_09_4",
    "check_10_1", "check_10_2", "check_10_3", "check_11_1", "check_11_2", "check_11_3", "check_12_1",
    "check_12_2", "check_12_3", "check_13_1", "check_13_2", "check_13_3", "check_14_1", "check_14_2",
    "check_15_1", "check_15_2", "check_15_3"]
