"""Diagrams of who runs where: each function returns a matplotlib Figure.

* :func:`parallelism_overview` - data vs model parallelism, DataParallel vs DDP (notebook 00).
* :func:`launch_tree` - the process tree of a real torchrun launch, drawn from the records its
  workers wrote with :func:`ddp_helpers.processes.save_launch_record` (notebook 03).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ddp_helpers.viz.figures import BOX, RS_COLOR, blank_axes, draw_arrow, draw_box, print_fontsize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# --------------------------------------------------------------------------- 00: parallelism

def parallelism_overview() -> Figure:
    """Four panels: data parallelism, model parallelism, ``nn.DataParallel`` and DDP.

    Each panel shows the processes, the GPUs, and what travels between them per step. 8 in wide
    with text of 10 pt or more: about 8.3 pt when printed at the A4 handouts' width.
    """
    import matplotlib.pyplot as plt

    fs = 10  # every text; the titles 11
    fig, axes = plt.subplots(2, 2, figsize=(8, 9.6))
    (data_ax, model_ax), (dp_ax, ddp_ax) = axes
    lim = ((0, 10), (0, 8.6))

    # Data parallelism: every GPU holds the whole model and a slice of the batch.
    blank_axes(data_ax, *lim, "Data parallelism:\nsplit the batch")
    draw_box(data_ax, 2.2, 7.6, 5.6, 0.8, "global batch of 64", BOX["kernel"], fontsize=fs)
    for i, x in enumerate((0.1, 6.0)):
        draw_box(data_ax, x, 2.0, 3.9, 4.3, "", BOX["gpu"])
        data_ax.text(x + 1.95, 5.75, f"GPU {i}: full copy", ha="center", va="center", fontsize=fs,
                     fontweight="bold")
        for k in range(3):
            draw_box(data_ax, x + 0.45, 4.5 - 1.0 * k, 3.0, 0.7, f"layer {k}", "white", fontsize=fs)
    draw_arrow(data_ax, (4.2, 7.6), (2.05, 6.35), "32 samples", fontsize=fs, text_offset=(-0.9, 0.1))
    draw_arrow(data_ax, (5.8, 7.6), (7.95, 6.35), "32 samples", fontsize=fs, text_offset=(0.9, 0.1))
    draw_arrow(data_ax, (4.1, 3.85), (5.9, 3.85), "", style="<|-|>", color=RS_COLOR)
    data_ax.text(5.0, 0.9, "gradients are averaged (all-reduce):\nevery replica takes the same step",
                 ha="center", va="center", fontsize=fs, color=RS_COLOR)

    # Model parallelism: the layers are split, the activations travel.
    blank_axes(model_ax, *lim, "Model parallelism:\nsplit the model")
    draw_box(model_ax, 1.6, 7.6, 6.8, 0.8, "batch of 64 (all of it)", BOX["kernel"], fontsize=fs)
    for i, (x, layers) in enumerate(((0.1, (0, 1)), (6.3, (2, 3)))):
        draw_box(model_ax, x, 2.0, 3.6, 4.3, "", BOX["gpu"])
        model_ax.text(x + 1.8, 5.75, f"GPU {i}", ha="center", va="center", fontsize=fs, fontweight="bold")
        for k, layer in enumerate(layers):
            draw_box(model_ax, x + 0.3, 4.5 - 1.3 * k, 3.0, 0.7, f"layer {layer} only", "white", fontsize=fs)
    draw_arrow(model_ax, (4.0, 7.6), (1.9, 6.35))
    draw_arrow(model_ax, (3.75, 4.0), (6.25, 4.0), "activations", fontsize=fs, text_offset=(0, 0.45))
    draw_arrow(model_ax, (6.25, 3.0), (3.75, 3.0), "gradients", color="tab:purple", fontsize=fs,
               text_offset=(0, -0.45))
    model_ax.text(5.0, 0.9, "for a model too big for one GPU;\nthe GPUs wait for each other\n"
                  "unless the batch is pipelined", ha="center", va="center", fontsize=fs)

    # nn.DataParallel: one process, one thread per GPU, GPU 0 is the hub.
    blank_axes(dp_ax, *lim, "nn.DataParallel (DP):\n1 process, threads")
    draw_box(dp_ax, 0.15, 0.15, 9.7, 8.3, "", BOX["process"], style="round,pad=0.05")
    dp_ax.text(5.0, 7.75, "one Python process (one GIL),\none thread per GPU", ha="center", va="center",
               fontsize=fs)
    draw_box(dp_ax, 3.1, 5.2, 3.8, 1.7, "GPU 0\nmodel + inputs\noutputs, loss", BOX["gpu"], fontsize=fs)
    for i, x in enumerate((0.5, 6.9)):
        draw_box(dp_ax, x, 1.2, 2.6, 1.2, f"GPU {i + 1}\nreplica", BOX["gpu"], fontsize=fs)
        start, end = (4.0 + 2.0 * i, 5.2), (x + 1.3, 2.4)
        draw_arrow(dp_ax, start, end, "", rad=0.15 if i else -0.15)
        draw_arrow(dp_ax, (end[0] + (0.6 if i else -0.6), end[1]), (start[0] + (0.6 if i else -0.6), start[1]),
                   "", color="tab:purple", rad=0.15 if i else -0.15)
    panel = {"facecolor": BOX["process"], "edgecolor": "none", "pad": 1.0}
    dp_ax.text(5.0, 4.25, "every step, from GPU 0:\nweights (replicate),\ninputs (scatter)",
               ha="center", va="center", fontsize=fs, bbox=panel)
    dp_ax.text(5.0, 2.3, "back to GPU 0:\noutputs (gather),\ngradients (reduce)", ha="center",
               va="center", fontsize=fs, color="tab:purple", bbox=panel)
    dp_ax.text(5.0, 0.6, "single machine only", ha="center", va="center", fontsize=fs, style="italic")

    # DDP: one process per GPU, only gradients travel, overlapped with backward.
    blank_axes(ddp_ax, *lim, "DistributedDataParallel (DDP):\n1 process per GPU")
    for i, x in enumerate((0.1, 5.3)):
        draw_box(ddp_ax, x, 3.3, 4.6, 5.1, "", BOX["process"], style="round,pad=0.05")
        ddp_ax.text(x + 2.3, 7.9, f"process, rank {i}", ha="center", va="center", fontsize=fs,
                    fontweight="bold")
        draw_box(ddp_ax, x + 0.2, 3.55, 4.2, 3.85, f"GPU {i}\nmodel replica\n(built once)\n"
                 f"its own batch slice\n(DistributedSampler)", BOX["gpu"], fontsize=fs)
    draw_arrow(ddp_ax, (4.55, 5.5), (5.45, 5.5), "", style="<|-|>", color=RS_COLOR)
    ddp_ax.text(5.0, 1.55, "only gradients travel: all-reduce\nper bucket, during backward;\n"
                "weights are broadcast once,\nwhen DDP wraps the model;\nworks across machines",
                ha="center", va="center", fontsize=fs, color=RS_COLOR)
    fig.tight_layout()
    return fig


def launch_tree(records: Iterable[Mapping[str, Any]]) -> Figure:
    """The process tree of one torchrun launch, from its workers' :func:`launch_record` s.

    Top: the process that ran torchrun; then one box per agent (one per node), each
    hosting the TCPStore if a worker found it listening there; then the workers, with
    their pid, RANK and LOCAL_RANK. Solid arrows: "started"; dashed: every worker's
    store connection to MASTER_ADDR:MASTER_PORT.
    """
    import matplotlib.pyplot as plt

    records = sorted(records, key=lambda r: r["rank"])
    if not records:
        raise ValueError("launch_tree needs at least one worker record")
    agents = list(dict.fromkeys(r["agent_pid"] for r in records))
    workers = {a: [r for r in records if r["agent_pid"] == a] for a in agents}
    n = len(records)
    # 7 in wide up to 4 workers (10 pt prints at about 9.5 pt on A4), 1.6 in more per further worker
    width = max(7.0, 1.6 * n + 0.6)
    fs = print_fontsize(width, 9.5)
    fig, ax = plt.subplots(figsize=(width, 6.4))
    blank_axes(ax, (0, width), (-1.6, 5.1), f"torchrun launch: {len(agents)} agent(s), {n} worker(s)",
               fontsize=fs + 1)
    slot = (width - 0.6) / n
    xs = {r["rank"]: 0.3 + slot * i for i, r in enumerate(records)}
    agent_x = {}
    hosts = [a for a in agents if any(r["store_owner"] == "agent" for r in workers[a])]
    host_agent = hosts[0] if hosts else None
    for a in agents:
        left = min(xs[r["rank"]] for r in workers[a])
        right = max(xs[r["rank"]] for r in workers[a]) + slot - 0.2
        agent_x[a] = (left, right)
        host = a == host_agent
        cmd = " ".join([os.path.basename(c) for c in (workers[a][0].get("agent_cmdline") or [])[:1]]
                       + (workers[a][0].get("agent_cmdline") or [])[1:3])
        label = f"agent (torchrun), pid {a}\n{cmd}"
        if host:
            label += f"\nhosts the TCPStore\non {records[0]['master_addr']}:{records[0]['master_port']}"
        draw_box(ax, left, 2.35, right - left, 1.4, label, BOX["store"] if host else BOX["agent"], fontsize=fs)
    parents = {r.get("agent_ppid") for r in records}
    parent_text = ", ".join(str(p) for p in sorted(p for p in parents if p is not None)) or "?"
    draw_box(ax, width / 2 - 2.3, 4.35, 4.6, 0.65, f"the process that ran torchrun,\npid {parent_text}",
             BOX["kernel"], fontsize=fs)
    for left, right in agent_x.values():
        draw_arrow(ax, (width / 2, 4.35), ((left + right) / 2, 3.75), "starts", fontsize=fs,
                   text_offset=(0.45, 0))
    for r in records:
        x = xs[r["rank"]]
        owner = "\nhosts the TCPStore" if r["store_owner"] == "worker" else ""
        worker = "worker, pid" if slot >= 2.2 else "worker\npid"  # narrow slots: one more line
        draw_box(ax, x, 0.15, slot - 0.2, 1.35, f"{worker} {r['pid']}\nRANK={r['rank']}\n"
                 f"LOCAL_RANK={r['local_rank']}{owner}", BOX["process"], fontsize=fs)
        draw_arrow(ax, (x + 0.2 * (slot - 0.2), 2.35), (x + 0.2 * (slot - 0.2), 1.4))
        start = (x + 0.8 * (slot - 0.2), 1.4)
        if host_agent is None or host_agent == r["agent_pid"]:
            draw_arrow(ax, start, (start[0], 2.35), color="tab:green", ls="--")
        else:  # another node's agent hosts the store
            draw_arrow(ax, start, (agent_x[host_agent][1] - 0.3, 2.35), color="tab:green", ls="--", rad=0.25)
    store = "agent's store" if any(r["use_agent_store"] for r in records) else "rank 0's store"
    ax.text(0.3, -0.85, "solid: starts (the child's ppid)\ndashed: TCPStore client of MASTER_ADDR:MASTER_PORT,\n"
            f"the {store} (TORCHELASTIC_USE_AGENT_STORE={records[0]['use_agent_store']});\n"
            "the workers' gloo/NCCL links to each other are set up through it", fontsize=fs,
            color="tab:green", va="center")
    fig.tight_layout()
    return fig
