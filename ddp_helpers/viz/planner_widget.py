"""The planner as a picture, a table and a widget (notebook 14): bytes per rank and bytes sent.

    from ddp_helpers.viz.planner_widget import draw_plan, plan_table, planner_widget

The numbers come from :func:`ddp_helpers.planner.plan`; this module only lays them out:

* :func:`draw_plan` - one stacked bar per rank (parameters, gradients, optimizer state,
  activations) and one per rank of the bytes it sends, by group;
* :func:`plan_table` - the same per rank as text (ranks with equal numbers share a row),
  :func:`plan_table_html` as HTML;
* :func:`planner_widget` - dropdowns and sliders for the layout, the table and the picture.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from ddp_helpers.planner import PRESETS, Layout, ModelSpec, Plan, plan
from ddp_helpers.viz.figures import figure_box, png_bytes, redraw_on_change, show_in

if TYPE_CHECKING:
    from ipywidgets import VBox
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PART_COLORS: dict[str, str] = {"params": "tab:blue", "grads": "tab:orange", "optimizer": "tab:green",
                               "activations": "tab:purple"}
GROUP_COLORS: dict[str, str] = {"dp": "tab:red", "tp": "tab:olive", "pp": "tab:cyan", "cp": "tab:brown"}
COLUMNS = ("params", "grads", "optimizer", "activations", "total", "sent")
ZERO_CHOICES: dict[str, tuple[int, str]] = {
    "DDP": (0, "reduce_scatter"), "ZeRO-1": (1, "reduce_scatter"), "ZeRO-2": (2, "reduce_scatter"),
    "ZeRO-3 (FSDP)": (3, "reduce_scatter"), "ZeroRedundancyOptimizer": (1, "broadcast")}


def unit_for(largest: float) -> tuple[str, int]:
    """The binary unit that keeps ``largest`` between 1 and 1024 of it."""
    for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if largest >= size:
            return name, size
    return "B", 1


def grouped_rows(p: Plan) -> list[tuple[str, dict[str, int]]]:
    """(ranks, numbers) for each set of ranks whose numbers are equal, in rank order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in p.rows():
        groups.setdefault(tuple(int(row[c]) for c in COLUMNS), []).append(int(row["rank"]))
    out = []
    for values, ranks in groups.items():
        runs = ", ".join(str(r) for r in ranks) if len(ranks) <= 3 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
        out.append((runs, dict(zip(COLUMNS, values, strict=True))))
    return out


def plan_title(p: Plan) -> str:
    lay = p.layout
    parts = [f"dp={lay.dp}", f"tp={lay.tp}", f"pp={lay.pp}", f"cp={lay.cp}"]
    if lay.zero:
        parts.append("ZeroRedundancyOptimizer" if lay.zero_style == "broadcast" else f"ZeRO-{lay.zero}")
    if lay.pp > 1:
        parts.append(f"{lay.schedule}, m={lay.microbatches}")
    if lay.cp > 1:
        parts.append(lay.cp_style)
    return f"{p.model.name}, {p.world_size} ranks: " + ", ".join(parts) + f", batch {lay.batch}"


def plan_table(p: Plan) -> str:
    """A text table in bytes (integers: the same on every machine)."""
    rows = grouped_rows(p)
    width = max([5] + [len(r) for r, _ in rows])
    lines = [f"{'ranks':<{width}}" + "".join(f"{c:>14}" for c in COLUMNS)]
    lines += [f"{r:<{width}}" + "".join(f"{v[c]:>14}" for c in COLUMNS) for r, v in rows]
    return "\n".join(lines)


def plan_table_html(p: Plan) -> str:
    """The table of :func:`plan_table` in HTML, in a readable unit."""
    unit, size = unit_for(max(max(r.total for r in p.ranks), max(r.sent() for r in p.ranks), 1))
    head = "".join(f"<th>{c}</th>" for c in ("ranks", *COLUMNS))
    body = "".join("<tr><td>" + html.escape(r) + "</td>" + "".join(f"<td>{v[c] / size:,.2f}</td>" for c in COLUMNS)
                   + "</tr>" for r, v in grouped_rows(p))
    return (f"<table><caption>bytes per rank in {unit} (sent: one training step)</caption>"
            f"<tr>{head}</tr>{body}</table>")


def draw_plan(p: Plan, axes: tuple[Axes, Axes] | None = None) -> Figure:
    """Memory per rank (stacked: parameters, gradients, optimizer state, activations) on the
    left, bytes each rank sends in one step (stacked by group) on the right. Returns the figure."""
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(8, 4.2), layout="constrained")  # prints at 8 pt or more
    fig = axes[0].figure
    ranks = [r.rank for r in p.ranks]
    unit, size = unit_for(max(max(r.total for r in p.ranks), 1))
    bottom = [0.0] * len(ranks)
    for part, color in PART_COLORS.items():
        heights = [getattr(r, part) / size for r in p.ranks]
        axes[0].bar(ranks, heights, bottom=bottom, color=color, label=part)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes[0].set_ylabel(f"{unit} per rank")
    axes[0].set_title("memory")
    sent_unit, sent_size = unit_for(max(max(r.sent() for r in p.ranks), 1))
    bottom = [0.0] * len(ranks)
    for group, color in GROUP_COLORS.items():
        heights = [r.sent(group) / sent_size for r in p.ranks]
        if any(heights):
            axes[1].bar(ranks, heights, bottom=bottom, color=color, label=group)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes[1].set_ylabel(f"{sent_unit} sent per step")
    axes[1].set_title("bytes sent (ring collectives)")
    step = -(-len(ranks) // 12)  # at most 12 rank labels per axis
    handles = []
    for ax in axes:
        ax.set_xticks(ranks[::step])
        ax.set_xlabel("rank")
        handles += ax.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, frameon=False)
    fig.suptitle(plan_title(p), fontsize="medium")
    return fig


def _error_figure(message: str) -> Figure:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.4))
    ax.axis("off")
    ax.text(0.0, 0.5, "No plan: " + message, color="#990000", va="center", wrap=True)
    return fig


def planner_widget(model: str = "GPT 24 layers x 2048, seq 2048 (1.2 billion)", dp: int = 2, tp: int = 2,
                   pp: int = 2, cp: int = 1, zero: str = "ZeRO-1", microbatches: int = 4, batch: int = 16,
                   models: dict[str, ModelSpec] | None = None) -> VBox:
    """An ipywidgets box: the model, dp, tp, pp, cp, ZeRO, the schedule and batch; the plan as a
    sentence, a table and :func:`draw_plan` below. The world size is dp·tp·pp·cp.

    The box keeps the latest Plan in ``box.plan`` (None with ``box.error`` when the layout does
    not fit the model) and its PNG in ``box.png`` (the box's own output carries that PNG too,
    shown where no widget can be rendered); ``box.controls`` names the controls.
    """
    import ipywidgets as w

    models = dict(PRESETS if models is None else models)
    degrees = [1, 2, 3, 4, 8]
    controls: dict[str, Any] = {
        "model": w.Dropdown(options=list(models), value=model, description="model",
                            layout=w.Layout(width="32em")),
        "dp": w.Dropdown(options=degrees, value=dp, description="dp", layout=w.Layout(width="9em")),
        "tp": w.Dropdown(options=degrees, value=tp, description="tp", layout=w.Layout(width="9em")),
        "pp": w.Dropdown(options=degrees, value=pp, description="pp", layout=w.Layout(width="9em")),
        "cp": w.Dropdown(options=degrees, value=cp, description="cp", layout=w.Layout(width="9em")),
        "zero": w.Dropdown(options=list(ZERO_CHOICES), value=zero, description="sharding"),
        "microbatches": w.IntSlider(value=microbatches, min=1, max=16, description="microbatches",
                                    style={"description_width": "initial"}),
        "schedule": w.Dropdown(options=["1f1b", "gpipe"], value="1f1b", description="schedule"),
        "cp_style": w.Dropdown(options=["ring", "ulysses"], value="ring", description="CP"),
        "batch": w.IntText(value=batch, description="global batch", style={"description_width": "initial"},
                           layout=w.Layout(width="12em")),
        "reshard_after_forward": w.Checkbox(value=True, description="reshard_after_forward", indent=False),
    }
    summary, table, out = w.HTML(), w.HTML(), w.Output()
    box = figure_box([controls["model"],
                      w.HBox([controls[k] for k in ("dp", "tp", "pp", "cp", "zero")]),
                      w.HBox([controls[k] for k in ("microbatches", "schedule", "cp_style", "batch",
                                                    "reshard_after_forward")]),
                      summary, table, out],
                     fallback_text="Planner (a widget): run the cell in JupyterLab to use it.")

    def redraw(_change: Any = None) -> None:
        c = {k: v.value for k, v in controls.items()}
        stage, style = ZERO_CHOICES[c["zero"]]
        world = c["dp"] * c["tp"] * c["pp"] * c["cp"]
        layout = Layout(dp=c["dp"], tp=c["tp"], pp=c["pp"], cp=c["cp"], zero=stage, zero_style=style,
                        reshard_after_forward=c["reshard_after_forward"], microbatches=c["microbatches"],
                        schedule=c["schedule"], cp_style=c["cp_style"], batch=c["batch"])
        try:
            box.plan, box.error = plan(models[c["model"]], layout, world), None
        except ValueError as err:
            box.plan, box.error = None, str(err)
        if box.plan is None:
            summary.value, table.value = f"<b>{html.escape(box.error)}</b>", ""
        else:
            summary.value = html.escape(plan_title(box.plan))
            table.value = plan_table_html(box.plan)
        show_in(box, out, png_bytes(_error_figure(box.error) if box.plan is None else draw_plan(box.plan)))

    box.controls, box.summary, box.table = controls, summary, table
    redraw_on_change(controls.values(), redraw)
    return box
