"""Show how one training script becomes a DDP script, one change at a time.

The steps are real files (``notebooks/walkthrough/step*.py``) that notebook 00 runs;
:func:`script_diff` renders the change between two of them, so the text a learner reads
is computed from the code that ran and cannot drift from it.

    script_diff("walkthrough/step5_hand_average.py", "walkthrough/step6_ddp.py")

Each step file opens with a docstring naming its step; the diff leaves it out (the
notebook's text says what the step does), so every hunk is a line of code that changed.
The hunk headers keep the files' real line numbers.

In JupyterLab the diff is coloured (``_repr_html_``); plain-text front ends, nbval and
the handouts' text fall back to the unified diff (``__repr__``).
"""

from __future__ import annotations

import ast
import difflib
import html
import re
from dataclasses import dataclass
from pathlib import Path

_COLOURS = {"+": "#e6ffec", "-": "#ffebe9", "@": "#ddf4ff"}


@dataclass(frozen=True)
class ScriptDiff:
    """A unified diff between two files, with counts of added and removed lines."""

    old: str
    new: str
    lines: tuple[str, ...]

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.startswith("+") and not line.startswith("+++"))

    @property
    def removed(self) -> int:
        return sum(1 for line in self.lines if line.startswith("-") and not line.startswith("---"))

    def __repr__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        rows = []
        for line in self.lines:
            colour = _COLOURS.get(line[:1], "transparent") if not line.startswith(("+++", "---")) else "#f6f8fa"
            rows.append(f'<div style="background:{colour};white-space:pre">{html.escape(line) or " "}</div>')
        return ('<div style="font-family:monospace;font-size:12px;border:1px solid #d0d7de;'
                f'padding:4px;overflow-x:auto">{"".join(rows)}</div>')


def _without_docstring(text: str) -> tuple[list[str], int]:
    """The file's lines without its module docstring, and how many lines were dropped before the rest."""
    lines = text.splitlines()
    try:
        body = ast.parse(text).body
    except SyntaxError:  # not Python: compared whole
        return lines, 0
    first = body[0] if body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return lines[first.end_lineno:], first.end_lineno
    return lines, 0


def _shift(header: str, old_by: int, new_by: int) -> str:
    """A hunk header with its start lines moved by the lines the docstrings took."""
    def move(match: re.Match[str]) -> str:
        sign, start, rest = match.group(1), int(match.group(2)), match.group(3) or ""
        by = old_by if sign == "-" else new_by
        return f"{sign}{start + by if start else start}{rest}"
    return re.sub(r"([-+])(\d+)(,\d+)?", move, header)


def script_diff(old: str | Path, new: str | Path, context: int = 2) -> ScriptDiff:
    """The unified diff from file ``old`` to file ``new`` (``context`` unchanged lines around each change).

    Module docstrings are left out of the comparison; hunk headers give the files' line numbers.
    """
    old, new = Path(old), Path(new)
    for path in (old, new):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: the walkthrough steps live in notebooks/walkthrough/")
    (old_lines, old_by), (new_lines, new_by) = _without_docstring(old.read_text()), _without_docstring(new.read_text())
    lines = difflib.unified_diff(old_lines, new_lines, fromfile=old.name, tofile=new.name, lineterm="", n=context)
    return ScriptDiff(old.name, new.name,
                      tuple(_shift(line, old_by, new_by) if line.startswith("@@") else line for line in lines))
