"""Figures drawn by code, in one place: each function returns a matplotlib Figure.

* :func:`parallelism_overview` - data vs model parallelism, DataParallel vs DDP (notebook 00).
* :func:`launch_tree` - the process tree of a real torchrun launch, drawn from the records
  its workers wrote with :func:`save_launch_record` (notebook 03).
* :func:`checkpoint_flow` - rank 0 saves atomically, the barrier, every rank loads, and a
  restart timeline, optionally from a real run's events (:func:`restart_events`, notebook 05).
* :func:`ddp_step_timeline` - forward, backward per parameter and the bucket all-reduces,
  from the ``"grad NAME"`` / ``"all-reduce bucket i"`` list notebook 04 records.

Plus what the widgets share: :func:`png_bytes` (a figure as PNG bytes) and
:func:`figure_box`, an ipywidgets VBox whose own output carries a PNG of its current
figure, so a stored notebook shows a picture where no widget can be rendered (an untrusted
notebook in JupyterLab, a handout without the widget JavaScript).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import re
from pathlib import Path

__all__ = [
    "png_bytes", "show_png", "figure_box",
    "parallelism_overview",
    "launch_record", "save_launch_record", "load_launch_records", "launch_tree",
    "restart_events", "checkpoint_flow",
    "timeline_steps", "ddp_step_timeline",
]

RS_COLOR, AG_COLOR = "tab:red", "tab:green"
BOX = {"process": "#dbe9f6", "gpu": "#fde9c9", "store": "#e2f0d9", "agent": "#ececec", "kernel": "#f4f4f4"}


# --------------------------------------------------------------------------- PNG and widgets

def png_bytes(fig, dpi: int = 100, close: bool = True) -> bytes:
    """``fig`` as PNG bytes (any matplotlib backend, including headless ``agg``)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    if close:
        plt.close(fig)
    return buffer.getvalue()


def show_png(png: bytes) -> None:
    """Display PNG bytes as one ``image/png`` output."""
    from IPython.display import Image, display

    display(Image(data=png, format="png"))


@functools.cache
def _figure_box_class():
    import ipywidgets as w

    class FigureBox(w.VBox):
        """A VBox whose display bundle also holds ``image/png`` of ``self.png``.

        JupyterLab renders the widget when it can; an untrusted notebook (one just cloned)
        only renders safe types and picks the PNG, not the ``VBox(children=...`` text.
        """

        png: bytes = b""
        fallback_text: str = ""

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            if self.png:
                bundle["image/png"] = base64.b64encode(self.png).decode("ascii")
            if self.fallback_text:
                bundle["text/plain"] = self.fallback_text
            return bundle

    return FigureBox


def figure_box(children, fallback_text: str = ""):
    """A ``FigureBox`` (ipywidgets VBox) of ``children``; set ``box.png`` on every redraw."""
    box = _figure_box_class()(children)
    box.fallback_text = fallback_text
    return box


# --------------------------------------------------------------------------- drawing helpers

def _box(ax, x, y, w, h, text, face, fontsize=9, weight="normal", edge="#555555", style="round,pad=0.02"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=face, edgecolor=edge, lw=1))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, fontweight=weight)


def _arrow(ax, start, end, text="", color="#333333", style="-|>", ls="-", rad=0.0, fontsize=8,
           text_offset=(0.0, 0.0)):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color,
                                 linestyle=ls, lw=1.3, connectionstyle=f"arc3,rad={rad}"))
    if text:
        mx = (start[0] + end[0]) / 2 + text_offset[0]
        my = (start[1] + end[1]) / 2 + text_offset[1]
        ax.text(mx, my, text, ha="center", va="center", fontsize=fontsize, color=color,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})


def _blank(ax, xlim, ylim, title):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    ax.set_title(title, fontsize=11, loc="left", fontweight="bold")


# --------------------------------------------------------------------------- 00: parallelism

def parallelism_overview():
    """Four panels: data parallelism, model parallelism, ``nn.DataParallel`` and DDP.

    Each panel shows the processes, the GPUs, and what travels between them per step.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.2))
    (data_ax, model_ax), (dp_ax, ddp_ax) = axes

    # Data parallelism: every GPU holds the whole model and a slice of the batch.
    _blank(data_ax, (0, 10), (0, 7), "Data parallelism: split the batch")
    _box(data_ax, 3.2, 6.0, 3.6, 0.7, "global batch of 64", BOX["kernel"])
    for i, x in enumerate((1.0, 5.8)):
        _box(data_ax, x, 1.2, 3.2, 3.6, "", BOX["gpu"])
        data_ax.text(x + 1.6, 4.45, f"GPU {i}", ha="center", fontsize=9, fontweight="bold")
        for k in range(3):
            _box(data_ax, x + 0.4, 3.4 - 0.8 * k, 2.4, 0.6, f"layer {k} (full copy)", "white", fontsize=8)
        _arrow(data_ax, (5.0, 6.0), (x + 1.6, 4.85), "32 samples", rad=0.0)
    _arrow(data_ax, (4.25, 2.0), (5.75, 2.0), "", style="<|-|>", color=RS_COLOR)
    data_ax.text(5.0, 0.6, "gradients are averaged (all-reduce)\nevery replica takes the same step",
                 ha="center", fontsize=8.5, color=RS_COLOR)

    # Model parallelism: the layers are split, the activations travel.
    _blank(model_ax, (0, 10), (0, 7), "Model parallelism: split the model")
    _box(model_ax, 3.2, 6.0, 3.6, 0.7, "batch of 64 (all of it)", BOX["kernel"])
    for i, (x, layers) in enumerate(((1.0, (0, 1)), (5.8, (2, 3)))):
        _box(model_ax, x, 1.2, 3.2, 3.6, "", BOX["gpu"])
        model_ax.text(x + 1.6, 4.45, f"GPU {i}", ha="center", fontsize=9, fontweight="bold")
        for k, layer in enumerate(layers):
            _box(model_ax, x + 0.4, 3.2 - 1.0 * k, 2.4, 0.6, f"layer {layer} only", "white", fontsize=8)
    _arrow(model_ax, (4.5, 6.0), (2.6, 4.85))
    _arrow(model_ax, (4.25, 2.6), (5.75, 2.6), "activations", text_offset=(0, 0.35))
    _arrow(model_ax, (5.75, 1.7), (4.25, 1.7), "gradients", color="tab:purple", text_offset=(0, -0.35))
    model_ax.text(5.0, 0.6, "for a model too big for one GPU; the GPUs wait for each other\n"
                  "unless the batch is pipelined", ha="center", fontsize=8.5)

    # nn.DataParallel: one process, one thread per GPU, GPU 0 is the hub.
    _blank(dp_ax, (0, 10), (0, 7), "nn.DataParallel (DP): 1 process, threads")
    _box(dp_ax, 0.3, 0.3, 9.4, 5.9, "", BOX["process"], style="round,pad=0.05")
    dp_ax.text(5.0, 5.75, "one Python process (one GIL), one thread per GPU", ha="center", fontsize=9)
    _box(dp_ax, 3.6, 3.9, 2.8, 1.2, "GPU 0\nmodel + inputs\noutputs, loss", BOX["gpu"], fontsize=8)
    for i, x in enumerate((0.8, 6.9)):
        _box(dp_ax, x, 1.0, 2.3, 1.1, f"GPU {i + 1}\nreplica", BOX["gpu"], fontsize=8)
        start, end = (4.3 + 1.4 * i, 3.9), (x + 1.15, 2.1)
        _arrow(dp_ax, start, end, "", rad=0.15 if i else -0.15)
        _arrow(dp_ax, (end[0] + (0.5 if i else -0.5), end[1]), (start[0] + (0.5 if i else -0.5), start[1]),
               "", color="tab:purple", rad=0.15 if i else -0.15)
    white = {"facecolor": BOX["process"], "edgecolor": "none", "pad": 1.0}
    dp_ax.text(5.0, 2.85, "every step, from GPU 0:\nweights (replicate), inputs (scatter)",
               ha="center", fontsize=8, bbox=white)
    dp_ax.text(5.0, 1.45, "back to GPU 0:\noutputs (gather), gradients (reduce)", ha="center",
               fontsize=8, color="tab:purple", bbox=white)
    dp_ax.text(5.0, 0.55, "single machine only", ha="center", fontsize=8, style="italic")

    # DDP: one process per GPU, only gradients travel, overlapped with backward.
    _blank(ddp_ax, (0, 10), (0, 7), "DistributedDataParallel (DDP): 1 process per GPU")
    for i, x in enumerate((0.4, 5.4)):
        _box(ddp_ax, x, 2.1, 4.2, 4.0, "", BOX["process"], style="round,pad=0.05")
        ddp_ax.text(x + 2.1, 5.65, f"process, rank {i}", ha="center", fontsize=9, fontweight="bold")
        _box(ddp_ax, x + 0.5, 2.6, 3.2, 2.5, f"GPU {i}\nmodel replica (built once)\n"
             f"its own batch slice\n(DistributedSampler)", BOX["gpu"], fontsize=8)
    _arrow(ddp_ax, (4.2, 3.85), (5.8, 3.85), "", style="<|-|>", color=RS_COLOR)
    ddp_ax.text(5.0, 0.9, "only gradients travel: all-reduce per bucket, during backward\n"
                "weights are broadcast once, when DDP wraps the model\nworks across machines",
                ha="center", fontsize=8.5, color=RS_COLOR)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- 03: launch tree

def _proc_stat_ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the parenthesised name


def _cmdline(pid: int) -> list[str]:
    try:
        return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets listening on ``port`` (Linux /proc/net/tcp and tcp6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    return inodes


def _owns_socket(pid: int, inodes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def launch_record() -> dict:
    """What one worker of a torchrun launch knows about its place in the process tree.

    ``pid``/``ppid`` (the parent is torchrun's agent, which starts the workers), the
    agent's parent (``agent_ppid``: whoever ran torchrun) and command line, the rank
    variables torchrun sets, and ``store_owner``: which of {agent, this worker} holds the
    socket listening on MASTER_ADDR:MASTER_PORT (Linux /proc; ``None`` if neither or
    unknown). With ``TORCHELASTIC_USE_AGENT_STORE=True`` every worker only connects to the
    agent's TCPStore (``torch/distributed/rendezvous.py``, ``_create_c10d_store``);
    otherwise rank 0 hosts it.
    """
    env = os.environ
    agent = os.getppid()
    port = int(env.get("MASTER_PORT", "0") or 0)
    inodes = _listening_inodes(port) if port else set()
    owner = None
    if inodes:
        owner = "agent" if _owns_socket(agent, inodes) else "worker" if _owns_socket(os.getpid(), inodes) else None
    return {
        "rank": int(env.get("RANK", "0")), "local_rank": int(env.get("LOCAL_RANK", "0")),
        "world_size": int(env.get("WORLD_SIZE", "1")), "group_rank": int(env.get("GROUP_RANK", "0")),
        "pid": os.getpid(), "ppid": agent, "agent_pid": agent, "agent_ppid": _proc_stat_ppid(agent),
        "agent_cmdline": _cmdline(agent)[:4],
        "master_addr": env.get("MASTER_ADDR"), "master_port": port or None,
        "use_agent_store": env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        "store_owner": owner,
    }


def save_launch_record(out_dir) -> dict:
    """Write :func:`launch_record` to ``out_dir/rank{RANK}.json`` and return it."""
    record = launch_record()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{record['rank']}.json").write_text(json.dumps(record, indent=1))
    return record


def load_launch_records(out_dir) -> list[dict]:
    """The records :func:`save_launch_record` wrote, in rank order: one per rank of one launch.

    Raises ValueError when the folder holds a different number of records than the world
    size (left over from an earlier launch with more ranks: clear the folder first).
    """
    records = sorted((json.loads(p.read_text()) for p in Path(out_dir).glob("rank*.json")),
                     key=lambda r: r["rank"])
    sizes = {r["world_size"] for r in records}
    if len(sizes) != 1 or [r["rank"] for r in records] != list(range(sizes.pop())):
        raise ValueError(f"{out_dir}: records of ranks {[r['rank'] for r in records]} do not form one launch")
    return records


def launch_tree(records):
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
    _blank(ax, (0, width), (-0.7, 5.1), f"torchrun launch: {len(agents)} agent(s), {n} worker(s)")
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
        _box(ax, left, 2.55, right - left, 1.1, label, BOX["store"] if host else BOX["agent"], fontsize=8.5)
    parents = {r.get("agent_ppid") for r in records}
    parent_text = ", ".join(str(p) for p in sorted(p for p in parents if p is not None)) or "?"
    _box(ax, width / 2 - 2.2, 4.35, 4.4, 0.6, f"the process that ran torchrun, pid {parent_text}",
         BOX["kernel"], fontsize=8.5)
    for left, right in agent_x.values():
        _arrow(ax, (width / 2, 4.35), ((left + right) / 2, 3.65), "starts", text_offset=(0.4, 0))
    for r in records:
        x = xs[r["rank"]]
        owner = "\nhosts the TCPStore" if r["store_owner"] == "worker" else ""
        _box(ax, x, 0.35, slot - 0.2, 1.2, f"worker pid {r['pid']}\nRANK={r['rank']} "
             f"LOCAL_RANK={r['local_rank']}{owner}", BOX["process"], fontsize=8.5)
        _arrow(ax, (x + 0.25 * (slot - 0.2), 2.55), (x + 0.25 * (slot - 0.2), 1.55))
        start = (x + 0.7 * (slot - 0.2), 1.55)
        if host_agent is None or host_agent == r["agent_pid"]:
            _arrow(ax, start, (start[0], 2.55), color="tab:green", ls="--")
        else:  # another node's agent hosts the store
            _arrow(ax, start, (agent_x[host_agent][1] - 0.3, 2.55), color="tab:green", ls="--", rad=0.25)
    store = "agent's store" if any(r["use_agent_store"] for r in records) else "rank 0's store"
    ax.text(0.3, -0.2, "solid: starts (the child's ppid)\ndashed: TCPStore client of MASTER_ADDR:"
            f"MASTER_PORT, the {store}\n(TORCHELASTIC_USE_AGENT_STORE={records[0]['use_agent_store']}); "
            "the workers' gloo/NCCL links to each other are set up through it", fontsize=8,
            color="tab:green", va="center")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- 05: checkpoint flow

_EPOCH = re.compile(r"^epoch (\d+):")
_RESUMED = re.compile(r"^attempt (\d+): resumed from snapshot, next epoch (\d+)")


def restart_events(rank0_lines) -> list[dict]:
    """Events of one or more runs of notebook 05's training worker, from rank 0's stdout.

    ``"epoch E: ..."`` ends epoch E (the worker then snapshots: next epoch E+1);
    ``"attempt A: resumed from snapshot, next epoch E"`` starts attempt A from the snapshot.
    A resume with a higher attempt number follows a failure torchrun restarted (a kill
    during epoch E, the one that did not finish); one with the same number follows a
    planned stop and a new launch. Returns dicts ``{"attempt", "kind", "epoch"}`` with
    kind in ``epoch_end``, ``kill``, ``stop``, ``resume``.
    """
    events, attempt = [], 0
    for line in rank0_lines:
        if m := _EPOCH.match(line):
            events.append({"attempt": attempt, "kind": "epoch_end", "epoch": int(m[1])})
        elif m := _RESUMED.match(line):
            new, epoch = int(m[1]), int(m[2])
            ended = "kill" if new > attempt else "stop"
            events.append({"attempt": attempt, "kind": ended, "epoch": epoch})
            attempt = new
            events.append({"attempt": attempt, "kind": "resume", "epoch": epoch})
    return events


DEFAULT_EVENTS = restart_events(["epoch 0:", "epoch 1:", "attempt 1: resumed from snapshot, next epoch 2",
                                 "epoch 2:", "epoch 3:"])


def _save_load_panel(ax, nproc: int):
    from matplotlib.patches import Rectangle

    _blank(ax, (0, 12), (0, 1.2 * nproc + 0.8), "One snapshot: rank 0 saves atomically, every rank loads")
    top = 1.2 * nproc + 0.3
    steps = [("torch.save(state,\nsnapshot.pt.tmp)", 0.8), ("flush +\nos.fsync", 3.0), ("os.replace(tmp,\nsnapshot.pt)", 4.9)]
    for r in range(nproc):
        y = top - 1.2 * (r + 1)
        ax.text(0.0, y + 0.45, f"rank {r}", fontsize=9, fontweight="bold", va="center")
        if r == 0:
            for text, x in steps:
                _box(ax, x, y, 1.8, 0.9, text, BOX["gpu"], fontsize=8)
            _arrow(ax, (2.6, y + 0.45), (3.0, y + 0.45))
            _arrow(ax, (4.8, y + 0.45), (4.9, y + 0.45))
        else:
            ax.plot([0.8, 6.7], [y + 0.45, y + 0.45], color="grey", ls=":", lw=1)
            ax.text(3.7, y + 0.6, "waits (does not write)", fontsize=8, color="grey", ha="center")
        _box(ax, 8.3, y, 3.5, 0.9, "torch.load(snapshot.pt,\nmap_location=own device,\nweights_only=True)",
             BOX["process"], fontsize=8)
        _arrow(ax, (7.4, y + 0.45), (8.3, y + 0.45))
    ax.add_patch(Rectangle((6.9, top - 1.2 * nproc), 0.35, 1.2 * nproc - 0.2, facecolor="#555555"))
    ax.text(7.07, top + 0.1, "dist.barrier()", ha="center", fontsize=8.5, fontweight="bold")
    ax.text(0.0, 0.15, "a crash before os.replace leaves the previous snapshot.pt intact; "
            "the barrier keeps every rank from loading a snapshot not yet written",
            fontsize=8, style="italic")


def _timeline_panel(ax, events):
    attempts = sorted({e["attempt"] for e in events})
    last_epoch = max(e["epoch"] for e in events)
    _blank(ax, (-0.2, len(events) + 1.4), (-0.6, len(attempts) + 0.1),
           "Restart timeline: epochs, snapshots, the failure and the resume")
    x = 0.0
    for e in events:
        y = len(attempts) - 1 - attempts.index(e["attempt"])
        if e["kind"] == "epoch_end":
            _box(ax, x, y + 0.2, 0.85, 0.5, f"epoch {e['epoch']}", BOX["process"], fontsize=8)
            ax.plot(x + 0.92, y + 0.45, marker="v", color="tab:blue", ms=7)
        elif e["kind"] in ("kill", "stop"):
            marker, color = ("X", RS_COLOR) if e["kind"] == "kill" else ("s", "grey")
            ax.plot(x + 0.4, y + 0.45, marker=marker, color=color, ms=11)
            ax.text(x + 0.4, y + 0.05, f"{'killed' if e['kind'] == 'kill' else 'stopped'} in epoch {e['epoch']}",
                    ha="center", fontsize=8, color=color)
        else:
            _box(ax, x, y + 0.2, 0.85, 0.5, f"load\nnext={e['epoch']}", BOX["store"], fontsize=7.5)
            prev_y = y + 1
            _arrow(ax, (x - 0.3, prev_y + 0.2), (x + 0.3, y + 0.7), "", color=AG_COLOR, rad=-0.3)
        x += 1.0
    for a in attempts:
        y = len(attempts) - 1 - attempts.index(a)
        ax.text(-0.15, y + 0.45, f"attempt {a}", ha="right", fontsize=9, fontweight="bold", va="center")
    ax.text(-0.2, -0.45, f"▼ snapshot written after the epoch (next epoch stored)   ✕ failure   "
            f"green: resume from the last snapshot; epochs 0..{last_epoch}",
            fontsize=8)


def checkpoint_flow(events=None, nproc: int = 2):
    """Two panels: one atomic save + barrier + load on ``nproc`` ranks, and a restart timeline.

    ``events`` as returned by :func:`restart_events` (a real run's rank-0 output); the default
    is 4 epochs with a kill in epoch 2 and one restart.
    """
    import matplotlib.pyplot as plt

    events = DEFAULT_EVENTS if events is None else list(events)
    if not events:
        raise ValueError("checkpoint_flow needs at least one event")
    attempts = len({e["attempt"] for e in events})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(11.0, 0.9 * len(events) + 2), 3.2 + 1.2 * nproc + 1.1 * attempts),
                                      height_ratios=[1.2 * nproc + 0.8, attempts + 0.7])
    _save_load_panel(top, nproc)
    _timeline_panel(bottom, events)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- 04: DDP step timeline

def timeline_steps(timeline) -> list[tuple[str, str, list[str]]]:
    """Parse ``"grad NAME"`` / ``"all-reduce bucket i"`` into (kind, label, bucket members).

    Kinds: ``grad`` (label = parameter name) and ``allreduce`` (label = ``bucket i``, members =
    the gradients that became ready since the previous all-reduce: the bucket's contents).
    """
    steps, pending = [], []
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


def ddp_step_timeline(timeline):
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
    fig, ax = plt.subplots(figsize=(max(9.0, 0.85 * (n_grads + 7)), 3.4))
    _blank(ax, (-1.8, n_grads + 5.2), (-0.9, 2.4), "One DDP step: backward overlaps the bucket all-reduces")
    _box(ax, 0.0, 1.3, 1.9, 0.7, "forward\n" + " → ".join(layers), BOX["process"], fontsize=8)
    x, buckets = 2.0, []
    for kind, label, members in steps:
        if kind == "grad":
            _box(ax, x, 1.3, 0.9, 0.7, f"grad\n{label}", BOX["gpu"], fontsize=7.5)
            x += 1.0
        else:  # launched when its last gradient is ready: at the current position
            buckets.append((label, members, x))
            ax.plot([x - 0.05, x - 0.05], [0.7, 1.3], color=RS_COLOR, lw=1, ls=":")
    done = max(x, buckets[-1][2] + 1.5 if buckets else x) + 0.1
    for i, (label, members, start) in enumerate(buckets):
        end = buckets[i + 1][2] if i + 1 < len(buckets) else done
        _box(ax, start, 0.05, end - start - 0.1, 0.65, f"all-reduce {label}\n({len(members)} grads)",
             "#f4cccc", fontsize=7.5)
    _box(ax, done + 0.1, 0.7, 1.3, 0.7, "wait all,\noptimizer\nstep", BOX["store"], fontsize=7.5)
    ax.text(-0.15, 1.65, "compute", ha="right", va="center", fontsize=9, fontweight="bold")
    ax.text(-0.15, 0.38, "communication", ha="right", va="center", fontsize=9, fontweight="bold")
    ax.text(0.0, -0.6, "order of events, not to scale: a bucket's all-reduce starts as soon as its last "
            "gradient is ready, while the gradients of earlier layers are still being computed",
            fontsize=8, style="italic")
    fig.tight_layout()
    return fig
