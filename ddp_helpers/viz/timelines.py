"""Timelines drawn from real runs: each function returns a matplotlib Figure.

* :func:`checkpoint_flow` - rank 0 saves atomically, the barrier, every rank loads, and a
  restart timeline, optionally from a real run's events
  (:func:`ddp_helpers.checkpoint.restart_events`, notebook 05).
* :func:`ddp_step_timeline` - forward, backward per parameter and the bucket all-reduces, from
  the ``"grad NAME"`` / ``"all-reduce bucket i"`` list notebook 04 records
  (:mod:`ddp_helpers.buckets`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ddp_helpers.checkpoint import restart_events
from ddp_helpers.viz.figures import AG_COLOR, BOX, RS_COLOR, blank_axes, draw_arrow, draw_box, print_fontsize

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# A kill during epoch 2, restarted by torchrun, resumed from the snapshot: the figure without a run.
DEFAULT_EVENTS = restart_events(["epoch 0:", "epoch 1:", "attempt 1: resumed from snapshot, next epoch 2",
                                 "epoch 2:", "epoch 3:"])


def _save_load_panel(ax: Axes, nproc: int, fs: float) -> None:
    from matplotlib.patches import Rectangle

    blank_axes(ax, (0, 12), (-0.6, 1.2 * nproc + 0.8), "One snapshot: rank 0 saves atomically, every rank loads",
               fontsize=fs + 1.5)
    top = 1.2 * nproc + 0.3
    steps = [("torch.save(state,\nsnapshot.pt.tmp)", 1.0, 2.3), ("flush +\nos.fsync", 3.6, 1.4),
             ("os.replace(tmp,\nsnapshot.pt)", 5.3, 2.0)]
    for r in range(nproc):
        y = top - 1.2 * (r + 1)
        ax.text(0.0, y + 0.45, f"rank {r}", fontsize=fs, fontweight="bold", va="center")
        if r == 0:
            for text, x, w in steps:
                draw_box(ax, x, y, w, 0.9, text, BOX["gpu"], fontsize=fs)
            draw_arrow(ax, (3.3, y + 0.45), (3.6, y + 0.45))
            draw_arrow(ax, (5.0, y + 0.45), (5.3, y + 0.45))
        else:
            ax.plot([1.0, 7.35], [y + 0.45, y + 0.45], color="grey", ls=":", lw=1)
            ax.text(4.2, y + 0.6, "waits (does not write)", fontsize=fs, color="grey", ha="center")
        draw_box(ax, 8.25, y, 3.6, 0.9, "torch.load(snapshot.pt,\nmap_location=own device,\nweights_only=True)",
                 BOX["process"], fontsize=fs)
        draw_arrow(ax, (7.85, y + 0.45), (8.25, y + 0.45))
    ax.add_patch(Rectangle((7.45, top - 1.2 * nproc), 0.35, 1.2 * nproc - 0.2, facecolor="#555555"))
    ax.text(7.62, top + 0.1, "dist.barrier()", ha="center", fontsize=fs, fontweight="bold")
    ax.text(0.0, -0.25, "a crash before os.replace leaves the previous snapshot.pt intact; the barrier\n"
            "keeps every rank from loading a snapshot not yet written", fontsize=fs, style="italic",
            va="center")


def _timeline_panel(ax: Axes, events: Sequence[Mapping[str, Any]], fs: float) -> None:
    attempts = sorted({e["attempt"] for e in events})
    last_epoch = max(e["epoch"] for e in events)
    blank_axes(ax, (-0.2, len(events) + 0.4), (-1.0, len(attempts) + 0.1),
               "Restart timeline: epochs, snapshots, the failure and the resume", fontsize=fs + 1.5)
    x = 0.0
    for e in events:
        y = len(attempts) - 1 - attempts.index(e["attempt"])
        if e["kind"] == "epoch_end":
            draw_box(ax, x, y + 0.2, 0.8, 0.5, f"epoch {e['epoch']}", BOX["process"], fontsize=fs)
            ax.plot(x + 0.88, y + 0.45, marker="v", color="tab:blue", ms=7)
        elif e["kind"] in ("kill", "stop"):
            marker, color = ("X", RS_COLOR) if e["kind"] == "kill" else ("s", "grey")
            ax.plot(x + 0.4, y + 0.5, marker=marker, color=color, ms=11)
            ax.text(x + 0.4, y + 0.05, f"{'killed' if e['kind'] == 'kill' else 'stopped'}\nin epoch {e['epoch']}",
                    ha="center", va="center", fontsize=fs, color=color)
        else:
            draw_box(ax, x, y + 0.2, 0.8, 0.5, f"load\nnext={e['epoch']}", BOX["store"], fontsize=fs)
            prev_y = y + 1
            draw_arrow(ax, (x - 0.3, prev_y + 0.2), (x + 0.3, y + 0.7), "", color=AG_COLOR, rad=-0.3)
        x += 1.0
    for a in attempts:
        y = len(attempts) - 1 - attempts.index(a)
        ax.text(-0.15, y + 0.45, f"attempt {a}", ha="right", fontsize=fs, fontweight="bold", va="center")
    ax.text(-0.2, -0.65, "▼ snapshot written after the epoch (next epoch stored)   ✕ failure\n"
            f"green: resume from the last snapshot; epochs 0..{last_epoch}", fontsize=fs, va="center")


def checkpoint_flow(events: Iterable[Mapping[str, Any]] | None = None, nproc: int = 2) -> Figure:
    """Two panels: one atomic save + barrier + load on ``nproc`` ranks, and a restart timeline.

    ``events`` as returned by :func:`restart_events` (a real run's rank-0 output); the default
    is 4 epochs with a kill in epoch 2 and one restart. 7.6 in wide up to 8 events, its text
    printed at about 8.3 pt on A4.
    """
    import matplotlib.pyplot as plt

    events = DEFAULT_EVENTS if events is None else list(events)
    if not events:
        raise ValueError("checkpoint_flow needs at least one event")
    attempts = len({e["attempt"] for e in events})
    width = max(7.6, 0.75 * len(events) + 1.6)
    fs = print_fontsize(width, 8.3)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 3.6 + 1.2 * nproc + 1.1 * attempts),
                                      height_ratios=[1.2 * nproc + 1.4, attempts + 1.1])
    _save_load_panel(top, nproc, fs)
    _timeline_panel(bottom, events, fs)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- 04: DDP step timeline

def timeline_steps(timeline: Iterable[str]) -> list[tuple[str, str, list[str]]]:
    """Parse ``"grad NAME"`` / ``"all-reduce bucket i"`` into (kind, label, bucket members).

    Kinds: ``grad`` (label = parameter name) and ``allreduce`` (label = ``bucket i``, members =
    the gradients that became ready since the previous all-reduce: the bucket's contents).
    """
    steps: list[tuple[str, str, list[str]]] = []
    pending: list[str] = []
    for entry in timeline:
        if entry.startswith("grad "):
            name = entry[len("grad "):]
            pending.append(name)
            steps.append(("grad", name, []))
        elif entry.startswith("all-reduce "):
            steps.append(("allreduce", entry[len("all-reduce "):], pending))
            pending = []
        else:
            raise ValueError(f"unknown timeline entry {entry!r}")
    return steps


def ddp_step_timeline(timeline: Iterable[str]) -> Figure:
    """One DDP step in event order: forward, each gradient becoming ready, each bucket's all-reduce.

    Two lanes: compute (forward, then backward one parameter at a time) and communication
    (a bucket's all-reduce is launched when its last gradient is ready and runs while
    backward goes on, until the optimizer step waits for all of them). The x axis is the
    order of events, not time.
    """
    import matplotlib.pyplot as plt

    steps = timeline_steps(timeline)
    grads = [label for kind, label, _ in steps if kind == "grad"]
    if not grads:
        raise ValueError("the timeline holds no gradients")
    layers = list(dict.fromkeys(g.rsplit(".", 1)[0] for g in grads))[::-1]  # forward order
    n_grads = len(grads)
    width = max(7.6, 0.62 * (1.2 * n_grads + 4.6))  # 7.6 in up to 7 gradients (notebook 04's model: 6)
    fs = print_fontsize(width, 8.3)  # prints at about 8.3 pt on A4
    grad_w = 1.2  # x units per gradient; 1.7 for forward, 1.2 for the last bucket and for the wait
    fig, ax = plt.subplots(figsize=(width, 3.9))
    ax.text(0.0, 2.2, "compute", va="bottom", fontsize=fs, fontweight="bold")
    draw_box(ax, 0.0, 1.35, 1.7, 0.75, "forward\n" + " → ".join(layers), BOX["process"], fontsize=fs)
    x, buckets = 1.8, []
    for kind, label, members in steps:
        if kind == "grad":
            draw_box(ax, x, 1.35, grad_w - 0.08, 0.75, f"grad\n{label}", BOX["gpu"], fontsize=fs)
            x += grad_w
        else:  # launched when its last gradient is ready: at the current position
            buckets.append((label, members, x))
            ax.plot([x - 0.04, x - 0.04], [0.85, 1.35], color=RS_COLOR, lw=1, ls=":")
    done = max(x, buckets[-1][2] + 1.2 if buckets else x) + 0.1
    blank_axes(ax, (-0.1, done + 1.35), (-1.5, 2.85), "One DDP step: backward overlaps the bucket all-reduces",
               fontsize=fs + 1.5)
    ax.text(0.0, 0.95, "communication", va="bottom", fontsize=fs, fontweight="bold")
    for i, (label, members, start) in enumerate(buckets):
        end = buckets[i + 1][2] if i + 1 < len(buckets) else done
        draw_box(ax, start, -0.05, end - start - 0.1, 0.9, f"all-reduce\n{label}\n({len(members)} grads)",
                 "#f4cccc", fontsize=fs)
    draw_box(ax, done, 0.75, 1.25, 0.95, "wait all,\noptimizer\nstep", BOX["store"], fontsize=fs)
    ax.text(0.0, -0.9, "order of events, not to scale: a bucket's all-reduce starts as soon as its\n"
            "last gradient is ready, while the gradients of earlier layers are still being computed",
            fontsize=fs, style="italic", va="center")
    fig.tight_layout()
    return fig
