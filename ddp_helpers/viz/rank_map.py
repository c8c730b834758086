"""The rank map: nodes, the processes torchrun starts on each, and the store they all connect to.

    from ddp_helpers.viz.rank_map import rank_map, rank_records

:func:`rank_records` checks one record per process (the names torchrun sets, ``RANK``,
``LOCAL_RANK``, ``GROUP_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, and the process's ``device``;
optionally ``MASTER_ADDR`` and ``MASTER_PORT``) and returns them sorted by rank, or raises
``ValueError`` when they cannot come from one launch. :func:`rank_map` draws them (notebook 00):
one box per node, one box per process inside it, and the rendezvous store every process connects to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ddp_helpers.viz.figures import BOX, blank_axes, draw_arrow, draw_box, print_fontsize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAMES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
NODE_FACE = "#f4f4f4"


def rank_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The records as dicts with integer ``NAMES``, sorted by ``RANK``; ``ValueError`` unless they
    describe one launch: ranks 0 .. WORLD_SIZE-1 once each, one WORLD_SIZE and LOCAL_WORLD_SIZE,
    local ranks 0 .. LOCAL_WORLD_SIZE-1 on every node, RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK,
    and a single store address (when the records carry one)."""
    rows = []
    for record in records:
        missing = [name for name in (*NAMES, "device") if name not in record]
        if missing:
            raise ValueError(f"a record lacks {missing}: {dict(record)}")
        row = {**record, **{name: int(record[name]) for name in NAMES}}
        row["device"] = str(record["device"])
        rows.append(row)
    if not rows:
        raise ValueError("the rank map needs at least one process record")
    rows.sort(key=lambda r: r["RANK"])
    ranks = [r["RANK"] for r in rows]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks: {ranks}")
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if len({r[name] for r in rows}) != 1:
            raise ValueError(f"the processes disagree on {name}: {[r[name] for r in rows]}")
    world, local_world = rows[0]["WORLD_SIZE"], rows[0]["LOCAL_WORLD_SIZE"]
    if ranks != list(range(world)):
        raise ValueError(f"ranks {ranks} are not 0 .. WORLD_SIZE-1 = {world - 1}")
    for r in rows:
        if r["RANK"] != r["GROUP_RANK"] * local_world + r["LOCAL_RANK"]:
            raise ValueError(f"rank {r['RANK']}: RANK != GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK "
                             f"({r['GROUP_RANK']} * {local_world} + {r['LOCAL_RANK']})")
    for node in sorted({r["GROUP_RANK"] for r in rows}):
        local = [r["LOCAL_RANK"] for r in rows if r["GROUP_RANK"] == node]
        if local != list(range(local_world)):
            raise ValueError(f"node {node} has local ranks {local}, not 0 .. {local_world - 1}")
    stores = {(r.get("MASTER_ADDR"), str(r.get("MASTER_PORT"))) for r in rows}
    if len(stores) != 1:
        raise ValueError(f"the processes name different stores: {sorted(map(str, stores))}")
    return rows


def rank_map(records: Iterable[Mapping[str, Any]]) -> Figure:
    """Nodes as boxes, each process inside its node with RANK, LOCAL_RANK and device, and the
    rendezvous store at MASTER_ADDR:MASTER_PORT that every process connects to (dashed)."""
    import matplotlib.pyplot as plt

    rows = rank_records(records)
    nodes = sorted({r["GROUP_RANK"] for r in rows})
    per_node = rows[0]["LOCAL_WORLD_SIZE"]
    node_w, slot = 0.4 + 2.3 * per_node, 2.3
    width = max(7.0, len(nodes) * (node_w + 0.4) + 0.2)
    fs = print_fontsize(width, 9.5)
    fig, ax = plt.subplots(figsize=(width, 5.0))
    blank_axes(ax, (0, width), (0, 5.6), f"Rank map: {len(nodes)} node(s) x {per_node} process(es), "
               f"WORLD_SIZE={rows[0]['WORLD_SIZE']}", fontsize=fs + 1)
    ax.set_xticks([])  # no tick labels: they would print below 8 pt
    ax.set_yticks([])
    addr, port = rows[0].get("MASTER_ADDR"), rows[0].get("MASTER_PORT")
    where = f"{addr}:{port}" if addr is not None and port is not None else "MASTER_ADDR:MASTER_PORT"
    store_w = 4.6
    draw_box(ax, (width - store_w) / 2, 4.45, store_w, 0.85, f"rendezvous store\n{where}", BOX["store"],
             fontsize=fs)
    left0 = (width - len(nodes) * (node_w + 0.4) + 0.4) / 2
    n_proc = len(rows)
    for i, node in enumerate(nodes):
        left = left0 + i * (node_w + 0.4)
        draw_box(ax, left, 0.2, node_w, 3.4, "", NODE_FACE, style="round,pad=0.05")
        ax.text(left + node_w / 2, 0.55, f"node {node} (GROUP_RANK={node})", ha="center",
                va="center", fontsize=fs, fontweight="bold")
        for r in (r for r in rows if r["GROUP_RANK"] == node):
            x = left + 0.2 + r["LOCAL_RANK"] * slot
            draw_box(ax, x, 0.95, slot - 0.2, 2.4, f"process\nRANK={r['RANK']}\nLOCAL_RANK={r['LOCAL_RANK']}\n"
                     f"device {r['device']}", BOX["process"], fontsize=fs)
            end = (width - store_w) / 2 + store_w * (r["RANK"] + 1) / (n_proc + 1)
            draw_arrow(ax, (x + (slot - 0.2) / 2, 3.35), (end, 4.45), color="tab:green", ls="--")
    ax.text(0.1, 4.87, "dashed: every process\nconnects to the store", fontsize=fs, color="tab:green",
            va="center")
    fig.tight_layout()
    return fig


def process_labels(fig: Figure) -> list[str]:
    """The texts of the process boxes of a :func:`rank_map` figure, left to right (for checks)."""
    texts = [t for t in fig.axes[0].texts if t.get_text().startswith("process\n")]
    return [t.get_text() for t in sorted(texts, key=lambda t: t.get_position()[0])]
