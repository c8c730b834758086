"""How the exercise-check tests call a check: from a lesson folder of their own, as a notebook would, and
refused with a hint. Shared by tests/test_exercises*.py (tests/ is on sys.path)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from ddp_helpers import exercises


def put(folder: Path, relative: str, obj: object) -> Path:
    """Write ``obj`` where a lesson's launch writes it: JSON for .json, torch.save otherwise."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(obj))
    else:
        torch.save(obj, path)
    return path


@contextlib.contextmanager
def notebook_in(folder: Path) -> Iterator[None]:
    """Inside, the running notebook is in ``folder``: checks read the lesson's runs there (JPY_SESSION_NAME)."""
    before = os.environ.get("JPY_SESSION_NAME")
    os.environ["JPY_SESSION_NAME"] = str(folder / "notebook.ipynb")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JPY_SESSION_NAME", None)
        else:
            os.environ["JPY_SESSION_NAME"] = before


def refused_text(exid: str, call: Callable[[], object]) -> str:
    """The message of the CheckFailed that ``call()`` raises for exercise ``exid``: with a hint, without the
    check's source."""
    with pytest.raises(exercises.CheckFailed) as info:
        call()
    text = str(info.value)
    assert text.startswith(f"Exercise {exid}: ") and "\nHint: " in text, text
    assert "Traceback" not in text and "def check_" not in text
    return text
