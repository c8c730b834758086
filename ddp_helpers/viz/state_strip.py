"""The walkthrough's state strip: per step, what each rank trained on in its first step and how it ended.

One row per walkthrough step, drawn from the step's real run (:mod:`ddp_helpers.walk_record`): the
32 cells are the samples of the plain script's first batch (step 1, the reference), one lane per rank;
a cell is filled when that rank's first batch held the sample. Beside them, the samples a rank took
that the plain batch does not hold, the global batch (all ranks' samples in one optimizer step), and
whether the ranks ended with equal weights.

    from ddp_helpers.viz.state_strip import StripRow, state_strip, strip_facts

    row = StripRow("step 4\\nsampler", {0: batch_of_rank0, 1: batch_of_rank1}, weights_equal=False)
    strip_facts(row.shards, reference)   # {"global_batch": 64, "distinct": 64, ...}
    state_strip([row, ...], reference)   # a matplotlib Figure
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddp_helpers.viz.figures import PRINT_WIDTH_IN, blank_axes, print_fontsize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RANK_COLOURS = ("#4a86c5", "#e69138", "#6aa84f", "#a64d79")


@dataclass(frozen=True)
class StripRow:
    """One step: its label, each rank's first batch (sample indices), and whether the ranks'
    final weights are equal (``None`` for one process)."""

    label: str
    shards: Mapping[int, Sequence[int]]
    weights_equal: bool | None


def strip_facts(shards: Mapping[int, Sequence[int]], reference: Sequence[int]) -> dict[str, Any]:
    """What a row shows, as numbers: the global batch (samples in one optimizer step, all ranks),
    how many are distinct, each rank's count, the samples outside ``reference``, and whether the
    global batch is exactly ``reference`` (the same samples, each once)."""
    if not shards or not all(len(s) for s in shards.values()):
        raise ValueError("every rank needs a non-empty batch: was the step launched with record_env()?")
    taken = [int(i) for s in shards.values() for i in s]
    ref = {int(i) for i in reference}
    return {"global_batch": len(taken), "distinct": len(set(taken)),
            "per_rank": {int(r): len(s) for r, s in shards.items()},
            "outside": {int(r): sum(int(i) not in ref for i in s) for r, s in shards.items()},
            "same_as_reference": Counter(taken) == Counter(int(i) for i in reference)}


def _row_text(facts: dict[str, Any], weights_equal: bool | None) -> tuple[str, str]:
    per_rank = list(facts["per_rank"].values())
    n = len(per_rank)
    if n == 1:
        batch = f"{facts['global_batch']}"
    elif facts["distinct"] < facts["global_batch"]:
        batch = f"{facts['global_batch']} = {n}×{per_rank[0]}\n({facts['distinct']} distinct)"
    else:
        batch = f"{facts['global_batch']} = {n}×{per_rank[0]}"
    weights = "one model" if weights_equal is None else ("equal" if weights_equal else "differ")
    return batch, weights


def state_strip(rows: Sequence[StripRow], reference: Sequence[int],
                title: str = "What each rank trained on in its first step, and how the run ended") -> Figure:
    """The strip: one row per step (see the module docstring)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not rows:
        raise ValueError("no rows to draw")
    ref = [int(i) for i in reference]
    lanes_per_row = [len(row.shards) for row in rows]
    heights = [0.55 * n + 0.5 for n in lanes_per_row]
    width = PRINT_WIDTH_IN
    fs = print_fontsize(width, 8.3)
    fig, ax = plt.subplots(figsize=(width, 0.42 * sum(heights) + 0.9))
    cell, x0 = 0.85, 15.5
    x_out, x_batch, x_weights = x0 + cell * len(ref) + 4.2, x0 + cell * len(ref) + 9.8, 62.0
    total = sum(heights)
    blank_axes(ax, (0, 66), (-0.2, total + 1.6), title, fontsize=fs + 1)
    ax.text(x0, total + 0.35, f"the {len(ref)} samples of the plain script's first batch", fontsize=fs, va="bottom")
    for x, text in ((x_out, "other\nsamples"), (x_batch, "global\nbatch"), (x_weights, "weights\nat the end")):
        ax.text(x, total + 0.35, text, fontsize=fs, va="bottom", ha="center")
    top = total
    for row, height in zip(rows, heights, strict=True):
        facts = strip_facts(row.shards, ref)
        ranks = sorted(row.shards)
        ax.plot([0, 66], [top, top], color="#cccccc", lw=0.6)
        ax.text(0.2, top - height / 2, row.label, fontsize=fs, va="center", fontweight="bold")
        for lane, rank in enumerate(ranks):
            y = top - 0.35 - 0.55 * (lane + 1)
            taken = {int(i) for i in row.shards[rank]}
            colour = RANK_COLOURS[rank % len(RANK_COLOURS)] if len(ranks) > 1 else "#777777"
            name = f"rank {rank}" if len(ranks) > 1 else "process"
            ax.text(x0 - 0.4, y + 0.22, name, fontsize=fs, va="center", ha="right")
            for j, sample in enumerate(ref):
                ax.add_patch(Rectangle((x0 + cell * j, y), cell * 0.86, 0.45, edgecolor="#999999", lw=0.4,
                                       facecolor=colour if sample in taken else "white"))
            outside = facts["outside"][rank]
            ax.text(x_out, y + 0.22, f"+{outside}" if outside else "0", fontsize=fs, va="center", ha="center",
                    color=colour if outside else "#777777")
        batch, weights = _row_text(facts, row.weights_equal)
        ax.text(x_batch, top - height / 2, batch, fontsize=fs, va="center", ha="center")
        ax.text(x_weights, top - height / 2, weights, fontsize=fs, va="center", ha="center",
                color={"equal": "#38761d", "differ": "#cc0000"}.get(weights, "#333333"),
                fontweight="bold" if row.weights_equal is not None else "normal")
        top -= height
    fig.tight_layout()
    return fig
