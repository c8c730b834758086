"""The sampler explorer of notebook 02: what DistributedSampler hands each rank, as a picture and a widget.

    from ddp_helpers.viz.sampler_explorer import draw_sampler_grid, sampler_explorer

The data comes from :func:`ddp_helpers.samplers.sampler_grid`, which asks torch's own
``DistributedSampler`` for every rank: the picture shows what the workers would get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddp_helpers.samplers import SamplerGrid, grid_summary, sampler_grid
from ddp_helpers.viz.figures import figure_box, png_bytes, redraw_on_change, show_in

if TYPE_CHECKING:
    from ipywidgets import VBox
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS: dict[str, str] = {"sample": "#cfe2f3", "duplicate": "#f6b26b", "dropped": "#e06666", "empty": "#ffffff"}


TEXT_PT = 12  # titles, ticks, legend: about 8 pt when a two-grid figure is printed on A4

def draw_sampler_grid(data: SamplerGrid, ax: Axes | None = None) -> Figure:
    """Draw the grid: one row per rank, padded repeats in orange, dropped samples in a red strip below.

    Returns the matplotlib Figure (the caller shows or closes it).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    R, S = data.grid.shape
    width = max(S, len(data.dropped), 1)
    if ax is None:
        fig_w = min(max(1.6 + 0.5 * width, 5.0), 14.0)  # sized to the grid, not wider
        cell = min(0.5, (fig_w - 1.5) / width)  # inches per cell (cells are square)
        fig, ax = plt.subplots(figsize=(fig_w, 1.8 + cell * (R + 1.5)))
    else:
        fig = ax.figure
    # text sizes for print: a 10 in figure of two grids is printed about 6.4 in wide on A4, so 12 pt
    # comes out near 8 pt; a cell's label as large as the cell allows (0 when cells are too small)
    pos = ax.get_position()
    cell_pt = 72 * min(pos.width * fig.get_figwidth() / (width + 0.1),
                       pos.height * fig.get_figheight() / (R + (1.5 if data.dropped else 0)))
    label_size = min(14.0, 0.45 * cell_pt) if 0.45 * cell_pt >= 6 else 0
    for r in range(R):
        for p in range(S):
            color = COLORS["duplicate"] if data.duplicate[r, p] else COLORS["sample"]
            ax.add_patch(Rectangle((p, r), 1, 1, facecolor=color, edgecolor="grey", lw=0.6))
            if label_size:
                ax.text(p + 0.5, r + 0.5, str(data.grid[r, p]), ha="center", va="center", fontsize=label_size)
    if S == 0:  # an empty grid: outline each rank's (empty) row and say why
        for r in range(R):
            ax.add_patch(Rectangle((0, r + 0.1), width, 0.8, fill=False, edgecolor="grey", ls="--", lw=0.6))
        ax.text(width / 2, R / 2, "0 samples per rank\n(drop_last, n < replicas)", ha="center",
                va="center", fontsize=TEXT_PT, color="#990000",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 2})
    drop_row = R + 0.5
    for k, idx in enumerate(data.dropped):
        ax.add_patch(Rectangle((k, drop_row), 1, 1, facecolor=COLORS["dropped"], edgecolor="grey", lw=0.6))
        if label_size:
            ax.text(k + 0.5, drop_row + 0.5, str(idx), ha="center", va="center", fontsize=label_size)
    ax.set_xlim(-0.05, width + 0.05)
    ax.set_aspect("equal")
    ax.set_ylim(drop_row + 1 if data.dropped else R, 0)
    ax.set_yticks([r + 0.5 for r in range(R)] + ([drop_row + 0.5] if data.dropped else []))
    ax.set_yticklabels([f"rank {r}" for r in range(R)] + (["dropped"] if data.dropped else []))
    ax.set_xticks([p + 0.5 for p in range(S)])
    ax.set_xticklabels([str(p) for p in range(S)], fontsize=TEXT_PT)
    ax.tick_params(axis="y", labelsize=TEXT_PT)
    ax.set_xlabel("position in the rank's epoch", fontsize=TEXT_PT)
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"n={data.n}, num_replicas={R}, drop_last={data.drop_last}\n"
                 f"shuffle={data.shuffle}, seed={data.seed}, epoch={data.epoch}\n"
                 f"{S} per rank, {int(data.duplicate.sum())} padded repeats, "
                 f"{len(data.dropped)} dropped", fontsize=TEXT_PT)
    ax.legend(handles=[Patch(facecolor=COLORS[k], edgecolor="grey", label=lbl) for k, lbl in
                       (("sample", "sample"), ("duplicate", "padded repeat"), ("dropped", "dropped"))],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=3, fontsize=TEXT_PT, frameon=False)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    fig.tight_layout()
    return fig


def sampler_explorer(n: int = 10, num_replicas: int = 3, drop_last: bool = False, shuffle: bool = True,
                     seed: int = 0, epoch: int = 0) -> VBox:
    """An ipywidgets box: the sampler's arguments, a sentence on the result, and the grid below.

    The box keeps the latest SamplerGrid in ``box.data`` and its PNG in ``box.png`` (the box's
    own output carries that PNG too, shown where no widget can be rendered).
    """
    import ipywidgets as w

    narrow = {"description_width": "initial"}
    controls = {
        "n": w.IntSlider(value=n, min=1, max=40, description="dataset size"),
        "num_replicas": w.IntSlider(value=num_replicas, min=1, max=8, description="replicas"),
        "epoch": w.IntSlider(value=epoch, min=0, max=9, description="epoch"),
        "drop_last": w.Checkbox(value=drop_last, description="drop_last", indent=False,
                                layout=w.Layout(width="auto", margin="0 1.5em 0 0")),
        "shuffle": w.Checkbox(value=shuffle, description="shuffle", indent=False,
                              layout=w.Layout(width="auto", margin="0 1.5em 0 0")),
        "seed": w.IntText(value=seed, description="seed", style=narrow, layout=w.Layout(width="9em")),
    }
    summary, out = w.HTML(), w.Output()
    box = figure_box([w.HBox([controls["n"], controls["num_replicas"], controls["epoch"]]),
                      w.HBox([controls["drop_last"], controls["shuffle"], controls["seed"]]),
                      summary, out],
                     fallback_text="Sampler explorer (a widget): run the cell in JupyterLab to use it.")

    def redraw(_change: Any = None) -> None:
        box.data = sampler_grid(**{k: c.value for k, c in controls.items()})
        text = grid_summary(box.data)
        summary.value = f"<b>{text}</b>" if box.data.num_samples == 0 else text
        show_in(box, out, png_bytes(draw_sampler_grid(box.data)))

    box.controls, box.summary = controls, summary
    redraw_on_change(controls.values(), redraw)
    return box
