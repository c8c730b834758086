"""Show how one training script becomes a DDP script, one change at a time.

The steps are real files (``notebooks/walkthrough/step*.py``) that notebook 04 runs;
:func:`script_diff` renders the change between two of them, so the text a learner reads
is computed from the code that ran and cannot drift from it.

    script_diff("walkthrough/step2_sampler.py", "walkthrough/step3_ddp.py")

In JupyterLab the diff is coloured (``_repr_html_``); plain-text front ends, nbval and
the handouts' text fall back to the unified diff (``__repr__``).
"""

from __future__ import annotations

import difflib
import html
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


def script_diff(old: str | Path, new: str | Path, context: int = 2) -> ScriptDiff:
    """The unified diff from file ``old`` to file ``new`` (``context`` unchanged lines around each change)."""
    old, new = Path(old), Path(new)
    for path in (old, new):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: the walkthrough steps live in notebooks/walkthrough/")
    lines = difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines(),
                                 fromfile=old.name, tofile=new.name, lineterm="", n=context)
    return ScriptDiff(old.name, new.name, tuple(lines))
