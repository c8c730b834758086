"""Gradient accumulation with ``no_sync()`` on the gradient-ready / all-reduce timeline (notebook 04).

:func:`no_sync_timeline` draws one accumulation window from a real run: for every micro-batch the
``"grad NAME"`` and ``"all-reduce bucket i"`` events that :mod:`ddp_helpers.buckets` recorded
(``record_grad_ready`` and ``BucketRecorder`` on one list, cleared between micro-batches). Micro-batches
run under ``no_sync()`` show their gradients accumulating with an empty communication lane; the last
one shows each bucket's all-reduce launched as its gradients become ready, as in
:func:`ddp_helpers.viz.timelines.ddp_step_timeline`.

    no_sync_timeline([["grad 4.bias", ...], ["grad 4.bias", ...], ["grad 4.bias", ..., "all-reduce bucket 2"]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ddp_helpers.viz.figures import BOX, RS_COLOR, blank_axes, draw_box, print_fontsize
from ddp_helpers.viz.timelines import timeline_steps

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def window_facts(window: Sequence[Sequence[str]]) -> list[dict[str, int]]:
    """Per micro-batch: how many gradients became ready and how many all-reduces were launched."""
    facts = []
    for micro in window:
        steps = timeline_steps(micro)
        facts.append({"grads": sum(kind == "grad" for kind, _, _ in steps),
                      "allreduces": sum(kind == "allreduce" for kind, _, _ in steps)})
    return facts


def no_sync_timeline(window: Sequence[Sequence[str]]) -> Figure:
    """One accumulation window: a lane of compute and a lane of communication per micro-batch."""
    import matplotlib.pyplot as plt

    if not window:
        raise ValueError("the window holds no micro-batch")
    facts = window_facts(window)
    if any(f["grads"] == 0 for f in facts):
        raise ValueError("every micro-batch needs its gradient events (record_grad_ready)")
    width = 9.0
    fs = print_fontsize(width, 8.0)
    fig, ax = plt.subplots(figsize=(width, 3.3))
    x, grad_w = 0.0, 2.3
    ax.text(0.0, 2.25, "compute", va="bottom", fontsize=fs, fontweight="bold")
    ax.text(0.0, 0.95, "communication", va="bottom", fontsize=fs, fontweight="bold")
    for i, (micro, fact) in enumerate(zip(window, facts, strict=True)):
        draw_box(ax, x, 1.35, 1.0, 0.75, f"fwd\n{i + 1}", BOX["process"], fontsize=fs)
        x += 1.1
        if fact["allreduces"] == 0:  # under no_sync: the gradients only accumulate locally
            draw_box(ax, x, 1.35, 3.0, 0.75, f"backward {i + 1}\n{fact['grads']} grads,\nlocal only", BOX["gpu"],
                     fontsize=fs)
            ax.text(x + 1.5, 0.35, "no all-reduce\n(no_sync)", ha="center", va="center", fontsize=fs,
                    color="#777777", style="italic")
            x += 3.1
            continue
        buckets = []
        for kind, label, members in timeline_steps(micro):
            if kind == "grad":
                draw_box(ax, x, 1.35, grad_w - 0.08, 0.75, f"grad\n{label}", BOX["gpu"], fontsize=fs)
                x += grad_w
            else:
                buckets.append((label, members, x))
                ax.plot([x - 0.04, x - 0.04], [0.85, 1.35], color=RS_COLOR, lw=1, ls=":")
        for j, (label, _, start) in enumerate(buckets):
            end = buckets[j + 1][2] if j + 1 < len(buckets) else max(x, start + 2.3) + 0.1
            draw_box(ax, start, -0.05, end - start - 0.1, 0.9, f"all-reduce\n{label}", "#f4cccc", fontsize=fs)
        x = max(x, buckets[-1][2] + 2.3) + 0.1 if buckets else x
    draw_box(ax, x, 0.75, 2.0, 0.95, "wait all,\noptimizer\nstep", BOX["store"], fontsize=fs)
    blank_axes(ax, (-0.1, x + 2.1), (-0.3, 2.75),
               f"One accumulation window of {len(window)} micro-batches with no_sync()", fontsize=fs + 1.5)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    return fig
