"""What every figure and widget of the series shares.

* :func:`png_bytes` (a matplotlib figure as PNG bytes), :func:`show_png` and :func:`show_figure`;
  :func:`show_in` and :func:`redraw_on_change`, a widget's picture kept up to date;
* :func:`figure_box`, an ipywidgets VBox whose own output carries a PNG of its current figure,
  so a stored notebook shows a picture where no widget can be rendered (an untrusted notebook in
  JupyterLab, a handout without the widget JavaScript);
* the drawing primitives of the diagrams: :func:`draw_box`, :func:`draw_arrow`, :func:`blank_axes`
  and the colours ``BOX``, ``RS_COLOR``, ``AG_COLOR``.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RS_COLOR, AG_COLOR = "tab:red", "tab:green"
BOX: dict[str, str] = {"process": "#dbe9f6", "gpu": "#fde9c9", "store": "#e2f0d9", "agent": "#ececec", "kernel": "#f4f4f4"}

# Text sizes for print: the A4 handouts give an image at most about 6.6 in (the page's 186 mm less the
# 64 px prompt column, tools/handout_templates/handout/index.html.j2), so text drawn at these sizes
# stays at about 8 pt or more when a figure up to 8 in wide is scaled down. The diagrams below are
# sized so that each of their texts prints at >= 8 pt (tests/test_viz_print_size.py).
PRINT_WIDTH_IN = 6.6
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "legend.title_fontsize": 10, "figure.titlesize": 13}


def use_style() -> None:
    """Set ``STYLE`` in matplotlib's rcParams: every figure drawn afterwards (by this package or with
    ``plt`` in a notebook) gets its text sizes. Imports matplotlib, not pyplot (no backend is chosen)."""
    import matplotlib

    matplotlib.rcParams.update(STYLE)


# --------------------------------------------------------------------------- PNG and widgets

def png_bytes(fig: Figure, dpi: int = 100, close: bool = True) -> bytes:
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


def show_in(box: Any, out: Any, png: bytes) -> None:
    """Make ``png`` the widget box's picture (``box.png``) and show it in its output ``out``, in place
    of the last one."""
    box.png = png
    with out:
        out.clear_output(wait=True)
        show_png(png)


def redraw_on_change(controls: Iterable[Any], redraw: Callable[..., None]) -> None:
    """Call ``redraw`` whenever one of the widgets ``controls`` changes its value, and once now."""
    for control in controls:
        control.observe(redraw, names="value")
    redraw()


def show_figure(fig: Figure, dpi: int = 100) -> bytes:
    """Display ``fig`` as one PNG output and close it; return the PNG bytes.

    Unlike ``plt.show()`` or ``display(fig)`` this stores a picture in the
    notebook under any matplotlib backend, including the ``agg`` backend that
    headless execution (nbconvert, nbval) uses.
    """
    png = png_bytes(fig, dpi=dpi)
    show_png(png)
    return png


@functools.cache
def _figure_box_class() -> type:
    import ipywidgets as w

    class FigureBox(w.VBox):
        """A VBox whose display bundle also holds ``image/png`` of ``self.png``.

        JupyterLab renders the widget when it can; an untrusted notebook (one just cloned)
        only renders safe types and picks the PNG, not the ``VBox(children=...`` text.
        """

        png: bytes = b""
        fallback_text: str = ""

        def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
            bundle = super()._repr_mimebundle_(**kwargs)
            if self.png:
                bundle["image/png"] = base64.b64encode(self.png).decode("ascii")
            if self.fallback_text:
                bundle["text/plain"] = self.fallback_text
            return bundle

    return FigureBox


def figure_box(children: Sequence[Any], fallback_text: str = "") -> Any:
    """A ``FigureBox`` (ipywidgets VBox) of ``children``; set ``box.png`` on every redraw."""
    box = _figure_box_class()(children)
    box.fallback_text = fallback_text
    return box


# --------------------------------------------------------------------------- drawing helpers

def draw_box(ax: Axes, x: float, y: float, w: float, h: float, text: str, face: str, fontsize: float = 9,
             weight: str = "normal", edge: str = "#555555", style: str = "round,pad=0.02") -> None:
    """A rounded box at (x, y) of size w x h with centred text."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=face, edgecolor=edge, lw=1))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, fontweight=weight)


def draw_arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], text: str = "",
               color: str = "#333333",
               style: str = "-|>", ls: str = "-", rad: float = 0.0, fontsize: float = 8,
               text_offset: tuple[float, float] = (0.0, 0.0)) -> None:
    """An arrow from ``start`` to ``end``, bent by ``rad``, with an optional label at its middle."""
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color,
                                 linestyle=ls, lw=1.3, connectionstyle=f"arc3,rad={rad}"))
    if text:
        mx = (start[0] + end[0]) / 2 + text_offset[0]
        my = (start[1] + end[1]) / 2 + text_offset[1]
        ax.text(mx, my, text, ha="center", va="center", fontsize=fontsize, color=color,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})


def print_fontsize(fig_width: float, pt: float = 8.3) -> float:
    """The font size that prints at ``pt`` points when a figure ``fig_width`` inches wide is scaled
    to the handouts' A4 text width (``PRINT_WIDTH_IN``); ``pt`` itself for a narrower figure."""
    return round(max(pt, pt * fig_width / PRINT_WIDTH_IN), 1)


def blank_axes(ax: Axes, xlim: tuple[float, float], ylim: tuple[float, float], title: str,
               fontsize: float = 11) -> None:
    """Axes without ticks or frame, for a diagram, with a bold title on the left."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    ax.set_title(title, fontsize=fontsize, loc="left", fontweight="bold")
