"""Diagrams of who runs where: each function returns a matplotlib Figure.

* :func:`parallelism_overview` - data vs model parallelism, DataParallel vs DDP (notebook 00).
* :func:`launch_tree` - the process tree of a real torchrun launch, drawn from the records its
  workers wrote with :func:`ddp_helpers.processes.save_launch_record` (notebook 03).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ddp_helpers.viz.figures import BOX, RS_COLOR, blank_axes, draw_arrow, draw_box

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# --------------------------------------------------------------------------- 00: parallelism

def parallelism_overview() -> Figure:
    """Four panels: data parallelism, model parallelism, ``nn.DataParallel`` and DDP.

    Each panel shows the processes, the GPUs, and what travels between them per step.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.2))
    (data_ax, model_ax), (dp_ax, ddp_ax) = axes

    # Data parallelism: every GPU holds the whole model and a slice of the batch.
    blank_axes(data_ax, (0, 10), (0, 7), "Data parallelism: split the batch")
    draw_box(data_ax, 3.2, 6.0, 3.6, 0.7, "global batch of 64", BOX["kernel"])
    for i, x in enumerate((1.0, 5.8)):
        draw_box(data_ax, x, 1.2, 3.2, 3.6, "", BOX["gpu"])
        data_ax.text(x + 1.6, 4.45, f"GPU {i}", ha="center", fontsize=9, fontweight="bold")
        for k in range(3):
            draw_box(data_ax, x + 0.4, 3.4 - 0.8 * k, 2.4, 0.6, f"layer {k} (full copy)", "white", fontsize=8)
        draw_arrow(data_ax, (5.0, 6.0), (x + 1.6, 4.85), "32 samples", rad=0.0)
    draw_arrow(data_ax, (4.25, 2.0), (5.75, 2.0), "", style="<|-|>", color=RS_COLOR)
    data_ax.text(5.0, 0.6, "gradients are averaged (all-reduce)\nevery replica takes the same step",
                 ha="center", fontsize=8.5, color=RS_COLOR)

    # Model parallelism: the layers are split, the activations travel.
    blank_axes(model_ax, (0, 10), (0, 7), "Model parallelism: split the model")
    draw_box(model_ax, 3.2, 6.0, 3.6, 0.7, "batch of 64 (all of it)", BOX["kernel"])
    for i, (x, layers) in enumerate(((1.0, (0, 1)), (5.8, (2, 3)))):
        draw_box(model_ax, x, 1.2, 3.2, 3.6, "", BOX["gpu"])
        model_ax.text(x + 1.6, 4.45, f"GPU {i}", ha="center", fontsize=9, fontweight="bold")
        for k, layer in enumerate(layers):
            draw_box(model_ax, x + 0.4, 3.2 - 1.0 * k, 2.4, 0.6, f"layer {layer} only", "white", fontsize=8)
    draw_arrow(model_ax, (4.5, 6.0), (2.6, 4.85))
    draw_arrow(model_ax, (4.25, 2.6), (5.75, 2.6), "activations", text_offset=(0, 0.35))
    draw_arrow(model_ax, (5.75, 1.7), (4.25, 1.7), "gradients", color="tab:purple", text_offset=(0, -0.35))
    model_ax.text(5.0, 0.6, "for a model too big for one GPU; the GPUs wait for each other\n"
                  "unless the batch is pipelined", ha="center", fontsize=8.5)

    # nn.DataParallel: one process, one thread per GPU, GPU 0 is the hub.
    blank_axes(dp_ax, (0, 10), (0, 7), "nn.DataParallel (DP): 1 process, threads")
    draw_box(dp_ax, 0.3, 0.3, 9.4, 5.9, "", BOX["process"], style="round,pad=0.05")
    dp_ax.text(5.0, 5.75, "one Python process (one GIL), one thread per GPU", ha="center", fontsize=9)
    draw_box(dp_ax, 3.6, 3.9, 2.8, 1.2, "GPU 0\nmodel + inputs\noutputs, loss", BOX["gpu"], fontsize=8)
    for i, x in enumerate((0.8, 6.9)):
        draw_box(dp_ax, x, 1.0, 2.3, 1.1, f"GPU {i + 1}\nreplica", BOX["gpu"], fontsize=8)
        start, end = (4.3 + 1.4 * i, 3.9), (x + 1.15, 2.1)
        draw_arrow(dp_ax, start, end, "", rad=0.15 if i else -0.15)
        draw_arrow(dp_ax, (end[0] + (0.5 if i else -0.5), end[1]), (start[0] + (0.5 if i else -0.5), start[1]),
               "", color="tab:purple", rad=0.15 if i else -0.15)
    white = {"facecolor": BOX["process"], "edgecolor": "none", "pad": 1.0}
    dp_ax.text(5.0, 2.85, "every step, from GPU 0:\nweights (replicate), inputs (scatter)",
               ha="center", fontsize=8, bbox=white)
    dp_ax.text(5.0, 1.45, "back to GPU 0:\noutputs (gather), gradients (reduce)", ha="center",
               fontsize=8, color="tab:purple", bbox=white)
    dp_ax.text(5.0, 0.55, "single machine only", ha="center", fontsize=8, style="italic")

    # DDP: one process per GPU, only gradients travel, overlapped with backward.
    blank_axes(ddp_ax, (0, 10), (0, 7), "DistributedDataParallel (DDP): 1 process per GPU")
    for i, x in enumerate((0.4, 5.4)):
        draw_box(ddp_ax, x, 2.1, 4.2, 4.0, "", BOX["process"], style="round,pad=0.05")
        ddp_ax.text(x + 2.1, 5.65, f"process, rank {i}", ha="center", fontsize=9, fontweight="bold")
        draw_box(ddp_ax, x + 0.5, 2.6, 3.2, 2.5, f"GPU {i}\nmodel replica (built once)\n"
             f"its own batch slice\n(DistributedSampler)", BOX["gpu"], fontsize=8)
    draw_arrow(ddp_ax, (4.2, 3.85), (5.8, 3.85), "", style="<|-|>", color=RS_COLOR)
    ddp_ax.text(5.0, 0.9, "only gradients travel: all-reduce per bucket, during backward\n"
                "weights are broadcast once, when DDP wraps the model\nworks across machines",
                ha="center", fontsize=8.5, color=RS_COLOR)
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
    width = max(9.0, 2.3 * n + 1.0)
    fig, ax = plt.subplots(figsize=(width, 5.8))
    blank_axes(ax, (0, width), (-0.7, 5.1), f"torchrun launch: {len(agents)} agent(s), {n} worker(s)")
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
            label += f"\nhosts the TCPStore on {records[0]['master_addr']}:{records[0]['master_port']}"
        draw_box(ax, left, 2.55, right - left, 1.1, label, BOX["store"] if host else BOX["agent"], fontsize=8.5)
    parents = {r.get("agent_ppid") for r in records}
    parent_text = ", ".join(str(p) for p in sorted(p for p in parents if p is not None)) or "?"
    draw_box(ax, width / 2 - 2.2, 4.35, 4.4, 0.6, f"the process that ran torchrun, pid {parent_text}",
         BOX["kernel"], fontsize=8.5)
    for left, right in agent_x.values():
        draw_arrow(ax, (width / 2, 4.35), ((left + right) / 2, 3.65), "starts", text_offset=(0.4, 0))
    for r in records:
        x = xs[r["rank"]]
        owner = "\nhosts the TCPStore" if r["store_owner"] == "worker" else ""
        draw_box(ax, x, 0.35, slot - 0.2, 1.2, f"worker pid {r['pid']}\nRANK={r['rank']} "
             f"LOCAL_RANK={r['local_rank']}{owner}", BOX["process"], fontsize=8.5)
        draw_arrow(ax, (x + 0.25 * (slot - 0.2), 2.55), (x + 0.25 * (slot - 0.2), 1.55))
        start = (x + 0.7 * (slot - 0.2), 1.55)
        if host_agent is None or host_agent == r["agent_pid"]:
            draw_arrow(ax, start, (start[0], 2.55), color="tab:green", ls="--")
        else:  # another node's agent hosts the store
            draw_arrow(ax, start, (agent_x[host_agent][1] - 0.3, 2.55), color="tab:green", ls="--", rad=0.25)
    store = "agent's store" if any(r["use_agent_store"] for r in records) else "rank 0's store"
    ax.text(0.3, -0.2, "solid: starts (the child's ppid)\ndashed: TCPStore client of MASTER_ADDR:"
            f"MASTER_PORT, the {store}\n(TORCHELASTIC_USE_AGENT_STORE={records[0]['use_agent_store']}); "
            "the workers' gloo/NCCL links to each other are set up through it", fontsize=8,
            color="tab:green", va="center")
    fig.tight_layout()
    return fig
