"""Pictures of the ring all-reduce and of the collectives (notebook 01).

The data comes from :mod:`ddp_helpers.ring` (the same schedule that
``ring_all_reduce`` runs); this module only lays it out and draws it.

* :func:`step_view` - what every rank holds after ``k`` steps, and which transfers
  produced it (pure data, unit-tested).
* :func:`draw_ring_step` / :func:`ring_step_figure` - that view as a ranks x chunks grid.
* :func:`ring_stepper` - an ipywidgets stepper (◀ / ▶, Play, sliders) over the steps, for a chosen N.
* :func:`draw_holdings` - before/after values of each collective, one row per rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddp_helpers.ring import (
    ALL_GATHER,
    REDUCE_SCATTER,
    Transfer,
    num_steps,
    phase_of,
    ring_schedule,
    symbolic_states,
    terms,
)

if TYPE_CHECKING:
    import numpy as np
    from ipywidgets import VBox
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

PHASE_COLORS: dict[str, str] = {REDUCE_SCATTER: "tab:red", ALL_GATHER: "tab:green"}


@dataclass(frozen=True)
class RingView:
    """State of every rank's chunks after ``step`` steps of the ring on ``n`` ranks."""

    n: int
    step: int  # 0 = before the first transfer, num_steps(n) = done
    labels: list[list[str]]  # labels[rank][chunk], e.g. "B0+C0+D0"
    counts: list[list[int]]  # how many ranks' contributions each chunk holds
    transfers: list[Transfer]  # the transfers of the step that produced this state

    @property
    def title(self) -> str:
        total = num_steps(self.n)
        if self.step == 0:
            return f"N={self.n}: before the first step (each rank holds only its own data)"
        phase, s = phase_of(self.step - 1, self.n)
        return f"N={self.n}: after step {self.step}/{total} ({phase} step {s + 1}/{self.n - 1})"

    @property
    def received(self) -> set[tuple[int, int]]:
        """(rank, chunk) cells written at this step."""
        return {(t.dst, t.chunk) for t in self.transfers}


def step_view(n: int, step: int) -> RingView:
    """The ring's state after ``step`` steps, computed by :func:`ring.simulate_ring`."""
    states = symbolic_states(n)
    if not 0 <= step < len(states):
        raise ValueError(f"step must be in 0..{len(states) - 1} for n={n}, got {step}")
    labels = states[step]
    counts = [[len(terms(label)) for label in row] for row in labels]
    transfers = ring_schedule(n)[step - 1] if step > 0 else []
    return RingView(n, step, labels, counts, transfers)


def short_label(label: str) -> str:
    """Long partial sums abbreviated: ``B0+C0+D0+E0+A0`` -> ``B0+…+A0 (5)``."""
    parts = label.split("+")
    return label if len(parts) <= 4 else f"{parts[0]}+…+{parts[-1]} ({len(parts)})"


LABEL_FONTSIZE = 10  # points; at 100 dpi about 14 px; more where the figure is wider than the A4 text


def label_fontsize(n: int) -> float:
    """Cell and tick labels: 10 pt, or what prints at about 8.3 pt on A4 when the figure is wider."""
    from ddp_helpers.viz.figures import print_fontsize

    return max(LABEL_FONTSIZE, print_fontsize(figure_size(n)[0], 8.3))


def cell_text(label: str, n: int) -> str:
    """A cell's text: :func:`short_label`, on two lines from N = 7 (narrower cells)."""
    text = short_label(label)
    parts = text.split("+")
    if n < 7 or len(parts) < 3:
        return text
    if "…" in text:
        return text.replace(" (", "\n(")
    half = (len(parts) + 1) // 2
    return "+".join(parts[:half]) + "+\n" + "+".join(parts[half:])


def draw_ring_step(ax: Axes, view: RingView) -> None:
    """Draw ``view`` on ``ax``: rows = ranks, columns = chunks, shade = contributions.

    Cells written at this step get a thick border (red: reduce-scatter, added in;
    green: all-gather, copied in) and an arrow from the sender's cell. The wrap-around
    link (rank N-1 to rank 0) is drawn as an arrow leaving the bottom row and one entering
    the top row, inside the axes at every N.
    """
    from matplotlib import colormaps
    from matplotlib.patches import FancyArrowPatch, Rectangle

    n, cmap = view.n, colormaps["Blues"]
    fs = label_fontsize(n)
    ax.clear()
    for r in range(n):
        for c in range(n):
            shade = 0.15 + 0.6 * (view.counts[r][c] - 1) / max(1, n - 1)
            full = view.counts[r][c] == n
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=cmap(shade), edgecolor="white"))
            ax.text(c + 0.5, r + 0.5, cell_text(view.labels[r][c], n), ha="center", va="center",
                    fontsize=fs, linespacing=1.0,
                    color="white" if shade > 0.5 else "black", fontweight="bold" if full else "normal")

    def arrow(x: float, y0: float, y1: float, color: str) -> None:
        ax.add_patch(FancyArrowPatch((x, y0), (x, y1), arrowstyle="-|>", mutation_scale=12,
                                     color=color, linewidth=1.4))

    for t in view.transfers:
        color, x = PHASE_COLORS[t.phase], t.chunk + 0.88
        ax.add_patch(Rectangle((t.chunk + 0.04, t.dst + 0.04), 0.92, 0.92, fill=False,
                               edgecolor=color, linewidth=2.5))
        if t.dst == t.src + 1:
            arrow(x, t.src + 0.7, t.dst + 0.3, color)
        else:  # the wrap-around link n-1 -> 0: out at the bottom, in at the top
            arrow(x, t.src + 0.7, n + 0.4, color)
            arrow(x, -0.4, t.dst + 0.3, color)
    ax.set_xlim(0, n)
    ax.set_ylim(n + 0.45, -0.45)  # rank 0 on top; room for the wrap-around arrows
    ax.set_xticks([c + 0.5 for c in range(n)], [f"chunk {c}" for c in range(n)])
    ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)])
    ax.tick_params(length=0, labelsize=fs)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(view.title, fontsize=fs + 1)


def ring_legend_handles(n: int) -> list[Patch]:
    """Legend entries: the two phases' borders and what the shading means."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    cmap = colormaps["Blues"]
    return [
        Patch(facecolor="white", edgecolor=PHASE_COLORS[REDUCE_SCATTER], linewidth=2.5,
              label="reduce-scatter: received and added in"),
        Patch(facecolor="white", edgecolor=PHASE_COLORS[ALL_GATHER], linewidth=2.5,
              label="all-gather: received and copied in"),
        Patch(facecolor=cmap(0.15), label="light: only this rank's own value"),
        Patch(facecolor=cmap(0.75), label=f"dark, bold: the sum of all {n} ranks"),
    ]


def figure_size(n: int) -> tuple[float, float]:
    """Inches: about 1 inch per chunk column, 7 to 8.2 wide (printed on A4 at 8 pt or more)."""
    return max(7.0, min(8.2, 2.2 + 1.05 * n)), 2.7 + 0.6 * n


def ring_step_figure(n: int, step: int) -> Figure:
    """A new figure with :func:`draw_ring_step` for ``step_view(n, step)`` and a legend."""
    import matplotlib.pyplot as plt

    from ddp_helpers.viz.figures import print_fontsize

    fig, ax = plt.subplots(figsize=figure_size(n), layout="constrained")
    draw_ring_step(ax, step_view(n, step))
    legend_fs = print_fontsize(figure_size(n)[0], 8.3)
    fig.legend(handles=ring_legend_handles(n), loc="outside lower center", ncol=2, frameon=False,
               fontsize=legend_fs,
               title="darker cell = more ranks' contributions\nan arrow leaving the bottom row "
                     f"enters the top row (rank {n - 1} sends to rank 0)",
               title_fontsize=legend_fs)
    return fig


def ring_stepper(n: int = 4, max_n: int = 8, step: int = 0, interval_ms: int = 1200) -> VBox:
    """A widget that steps through the ring for N ranks: ◀ / ▶ buttons, Play, sliders.

    The picture is :func:`ring_step_figure`, the same drawing as a static figure cell;
    the box's own output also holds a PNG of it (``box.png``), shown where no widget can be.
    ``box.controls`` names the parts: ``n``, ``step``, ``prev``, ``next``, ``play``.
    """
    import ipywidgets as w

    from ddp_helpers.viz.figures import figure_box, png_bytes, redraw_on_change, show_in

    n_slider = w.IntSlider(value=n, min=2, max=max_n, description="N ranks")
    step_slider = w.IntSlider(value=step, min=0, max=num_steps(n), description="step")
    prev = w.Button(description="◀", tooltip="previous step", layout=w.Layout(width="3em"))
    nxt = w.Button(description="▶", tooltip="next step", layout=w.Layout(width="3em"))
    play = w.Play(value=step, min=0, max=num_steps(n), interval=interval_ms, description="play",
                  tooltip="play the steps")
    w.link((play, "value"), (step_slider, "value"))  # kernel-side: works in tests too
    w.link((play, "max"), (step_slider, "max"))
    out = w.Output()
    box = figure_box([w.HBox([n_slider, prev, nxt, play, step_slider]), out],
                     fallback_text="Ring stepper (a widget): run the cell in JupyterLab to step through it.")
    box.controls = {"n": n_slider, "step": step_slider, "prev": prev, "next": nxt, "play": play}

    def redraw(_: Any = None) -> None:
        step_slider.max = num_steps(n_slider.value)
        prev.disabled = step_slider.value == 0
        nxt.disabled = step_slider.value == step_slider.max
        box.view = step_view(n_slider.value, step_slider.value)
        show_in(box, out, png_bytes(ring_step_figure(n_slider.value, step_slider.value)))

    def move(by: int) -> None:
        step_slider.value = min(step_slider.max, max(0, step_slider.value + by))

    prev.on_click(lambda _: move(-1))
    nxt.on_click(lambda _: move(+1))
    redraw_on_change([n_slider, step_slider], redraw)
    return box


def holdings_text(value: object) -> str:
    """How one rank's value is written in the collectives diagram."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(holdings_text(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def draw_holdings(axes: Sequence[Axes] | np.ndarray, holdings: Mapping[str, Mapping[str, Sequence]]) -> None:
    """One row of ``axes`` per collective: what each rank holds before and after.

    ``holdings[name] = {"before": [v_rank0, v_rank1, ...], "after": [...]}``; ``None``
    means the rank holds nothing meaningful (drawn as "-", greyed out). A list of lists is
    written one inner list per line. The axes' figure is set to at most 7 in wide and tall
    enough for its rows (a text of words on two lines), so that its text (9 pt) prints at 8 pt or more on A4.
    """
    from matplotlib.patches import Rectangle

    from ddp_helpers.viz.figures import print_fontsize

    names = list(holdings)
    if len(axes) != len(names):
        raise ValueError(f"need one row of axes per collective ({len(names)}), got {len(axes)}")

    def cell(value: object) -> str:
        if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in value):
            return "\n".join(holdings_text(v) for v in value)
        text = holdings_text(value)
        if len(text) > 12 and " " in text and not text.startswith("["):  # words: two lines
            middle = min((i for i, c in enumerate(text) if c == " "), key=lambda i: abs(i - len(text) / 2))
            text = text[:middle] + "\n" + text[middle + 1:]
        return text

    texts = {name: {key: [cell(v) for v in holdings[name][key]] for key in ("before", "after")}
             for name in names}
    lines = max((t.count("\n") + 1 for row in texts.values() for col in row.values() for t in col), default=1)
    if len(axes):
        fig = axes[0].figure
        width, height = fig.get_size_inches()
        width = min(width, 7.0)
        fig.set_size_inches(width, max(height, len(names) * (0.4 + 0.2 * lines)))
        fs = print_fontsize(width, 8.4)
    for ax, name in zip(axes, names, strict=True):
        ax.clear()
        row = holdings[name]
        n = len(row["before"])
        for col, key in enumerate(("before", "after")):
            x0 = col * (n + 1)
            for r, value in enumerate(row[key]):
                face = "#eeeeee" if value is None else ("#dbe9f6" if key == "before" else "#c7e9c0")
                ax.add_patch(Rectangle((x0 + r, 0), 1, 1, facecolor=face, edgecolor="white"))
                ax.text(x0 + r + 0.5, 0.5, texts[name][key][r], ha="center", va="center", fontsize=fs,
                        linespacing=1.0)
                ax.text(x0 + r + 0.5, 1.05, f"rank {r}", ha="center", va="bottom", fontsize=fs)
        ax.annotate("", xy=(n + 0.85, 0.5), xytext=(n + 0.15, 0.5),
                    arrowprops={"arrowstyle": "-|>", "color": "grey"})
        ax.set_xlim(0, 2 * n + 1)
        ax.set_ylim(0, 1.4)
        ax.axis("off")
        ax.set_title(name, fontsize=fs + 0.5, loc="left", fontweight="bold")
