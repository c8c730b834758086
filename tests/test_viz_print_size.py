"""Every figure of ddp_helpers.viz, drawn with the notebooks' arguments, prints its text at about 8 pt or
more on the A4 handouts: a PNG wider than the text width is scaled down to it (issue 26, item 2)."""

import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.text import Text

import ddp_helpers.viz  # noqa: F401  (sets the print-sized rcParams, as a notebook's import does)
from ddp_helpers import samplers as S
from ddp_helpers.checkpoint import restart_events
from ddp_helpers.viz.accumulation import no_sync_timeline
from ddp_helpers.viz.dealing import dealing_figure
from ddp_helpers.viz.diagrams import launch_tree, parallelism_overview
from ddp_helpers.viz.rank_map import rank_map
from ddp_helpers.viz.ring_widget import draw_holdings, ring_step_figure
from ddp_helpers.viz.sampler_explorer import draw_sampler_grid
from ddp_helpers.viz.state_strip import StripRow, state_strip
from ddp_helpers.viz.timelines import checkpoint_flow, ddp_step_timeline

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tools/handout_templates/handout/index.html.j2"
PAPER_MM = {"A4": 210.0}
MIN_PRINTED_PT = 7.9


def text_width_in() -> float:
    """The width the print CSS gives an output image: the A4 page less its left and right margins and
    the prompt column in front of every output (img max-width: 100% of the output area)."""
    css = TEMPLATE.read_text()
    page = re.search(r"@page\s*\{([^}]*)\}", css).group(1)
    size = re.search(r"size:\s*(\w+)", page).group(1)
    margins = re.search(r"margin:\s*([^;]+);", page).group(1).split()
    horizontal = {1: margins[0], 2: margins[1], 3: margins[1], 4: margins[1]}[len(margins)]
    left = right = float(horizontal.removesuffix("mm"))
    if len(margins) == 4:
        left = float(margins[3].removesuffix("mm"))
    prompt_px = float(re.search(r"--jp-cell-prompt-width:\s*([\d.]+)px", css).group(1))
    assert re.search(r"OutputArea-output img \{ max-width: 100%", css), "the image rule this test assumes"
    return (PAPER_MM[size] - left - right) / 25.4 - prompt_px / 96


TEXT_WIDTH_IN = text_width_in()


def notebook_cell(name: str, needle: str) -> str:
    nb = json.loads(next((ROOT / "notebooks").glob(f"{name}*.ipynb")).read_text())
    return next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and needle in "".join(c["source"]))


def record(rank, agent=4321):
    return {"rank": rank, "local_rank": rank, "world_size": 2, "group_rank": 0, "pid": 123450 + rank,
            "ppid": agent, "agent_pid": agent, "agent_ppid": 1234,
            "agent_cmdline": ["/home/me/.venv/bin/python", "-m", "torch.distributed.run", "--standalone"],
            "master_addr": "127.0.0.1", "master_port": 29500, "use_agent_store": True, "store_owner": "agent"}


def holdings(n=3):
    """What notebook 01's scripts/01_collectives.py writes on 3 ranks."""
    start = [[r + 1.0, 10.0 * (r + 1)] for r in range(n)]
    tri = n * (n + 1) / 2
    return {"broadcast(src=0)": {"before": start, "after": [[1.0, 10.0]] * n},
            "reduce(dst=0, SUM)": {"before": start, "after": [[tri, 10 * tri]] + [None] * (n - 1)},
            "all_reduce(SUM)": {"before": start, "after": [[tri, 10 * tri]] * n},
            "all_reduce(MAX)": {"before": start, "after": [[n, 10.0 * n]] * n},
            "all_reduce(AVG)": {"before": start, "after": [[tri / n, 10 * tri / n]] * n},
            "all_gather": {"before": start, "after": [start] * n},
            "gather(dst=0)": {"before": start, "after": [start] + [None] * (n - 1)},
            "reduce_scatter(SUM)": {"before": [[10.0 * r + k for k in range(n)] for r in range(n)],
                                    "after": [[sum(10.0 * q + k for q in range(n))] for k in range(n)]},
            "barrier": {"before": [f"arrives at {0.2 * r:.1f} s" for r in range(n)],
                        "after": [f"leaves after {0.2 * (n - 1):.1f} s"] * n}}


def holdings_figure():
    # notebook 01's own figure: fig, axes = plt.subplots(len(holdings), 1, figsize=(9, 0.75 * len(holdings)))
    size = re.search(r"figsize=\(([\d.]+), ([\d.]+) \* len\(holdings\)\)",
                     notebook_cell("01_", "draw_holdings(axes, holdings)"))
    h = holdings()
    fig, axes = plt.subplots(len(h), 1, figsize=(float(size[1]), float(size[2]) * len(h)))
    draw_holdings(axes, h)
    fig.tight_layout()
    return fig


def sampler_grids_figure():
    # notebook 02: two grids side by side, in the notebook's own figure size
    size = re.search(r"figsize=\(([\d.]+), ([\d.]+)\)", notebook_cell("02_", "draw_sampler_grid(g, ax=ax)"))
    fig, axes = plt.subplots(1, 2, figsize=(float(size[1]), float(size[2])))
    for ax, drop_last in zip(axes, (False, True), strict=True):
        draw_sampler_grid(S.sampler_grid(10, 4, drop_last=drop_last, shuffle=True, seed=0, epoch=0), ax=ax)
    return fig


NOTEBOOK_04_TIMELINE = ["grad 4.bias", "grad 4.weight", "all-reduce bucket 0", "grad 2.bias", "grad 2.weight",
                        "all-reduce bucket 1", "grad 0.bias", "grad 0.weight", "all-reduce bucket 2"]
# notebook 05's crashed run: EPOCHS = 4, rank 1 killed in epoch HALF = 2, torchrun restarts, resumes at 2
NOTEBOOK_05_EVENTS = ["epoch 0:", "epoch 1:", "attempt 1: resumed from snapshot, next epoch 2", "epoch 2:", "epoch 3:"]

RANK_MAP_2X2 = [{"RANK": 2 * node + local, "LOCAL_RANK": local, "GROUP_RANK": node, "WORLD_SIZE": 4,
                 "LOCAL_WORLD_SIZE": 2, "device": "cpu"} for node in (0, 1) for local in (0, 1)]


def dealing_10_on_3():
    # notebook 02: 10 samples on 3 ranks, epochs 0 and 1 (the figure's size follows from these)
    epochs = {}
    for epoch in (0, 1):
        epochs[epoch] = [S.rank_indices(10, 3, rank, shuffle=True, seed=0, epoch=epoch) for rank in range(3)]
    return dealing_figure(epochs, 10)


FIGURES = {
    "00 parallelism_overview()": parallelism_overview,
    "00 rank_map(2 nodes x 2)": lambda: rank_map(RANK_MAP_2X2),
    "02 dealing_figure(10 on 3, 2 epochs)": dealing_10_on_3,
    "03 launch_tree(2 workers)": lambda: launch_tree([record(0), record(1)]),
    "04 ddp_step_timeline": lambda: ddp_step_timeline(NOTEBOOK_04_TIMELINE),
    "04 state_strip(8 steps)": lambda: state_strip(
        [StripRow(f"steps {k}-{k}\nsampler", {0: list(range(0, 32, 2)), 1: list(range(1, 32, 2))}, k % 2 == 0)
         for k in range(6)] + [StripRow("step 0\nshuffle", {0: list(range(32))}, None)] * 2, list(range(32))),
    "04 no_sync_timeline": lambda: no_sync_timeline(
        [[e for e in NOTEBOOK_04_TIMELINE if e.startswith("grad")]] * 2 + [NOTEBOOK_04_TIMELINE]),
    "05 checkpoint_flow(events)": lambda: checkpoint_flow(restart_events(NOTEBOOK_05_EVENTS)),
    "05 checkpoint_flow()": checkpoint_flow,
    "01 draw_holdings": holdings_figure,
    "01 ring_step_figure(4, 3)": lambda: ring_step_figure(4, 3),
    "02 draw_sampler_grid x 2": sampler_grids_figure,
    **{f"01 ring stepper N={n}": (lambda n=n: ring_step_figure(n, n - 1)) for n in range(2, 9)},
}


def printed_min_pt(fig) -> tuple[float, str]:
    fig.canvas.draw()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    smallest = min(texts, key=lambda t: t.get_fontsize())
    scale = min(1.0, TEXT_WIDTH_IN / fig.get_figwidth())
    return smallest.get_fontsize() * scale, smallest.get_text()


def test_text_width_is_read_from_the_print_css():
    assert 6.0 < TEXT_WIDTH_IN < 7.0  # A4 less 2 x 12 mm and the 64 px prompt: about 6.66 in


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_text_prints_at_8_pt_on_a4(name):
    fig = FIGURES[name]()
    try:
        printed, text = printed_min_pt(fig)
        assert printed >= MIN_PRINTED_PT, (
            f"{name}: {text!r} prints at {printed:.1f} pt ({fig.get_figwidth():.1f} in wide figure, "
            f"{TEXT_WIDTH_IN:.2f} in of A4 text width)")
    finally:
        plt.close(fig)
