"""The ring all-reduce: schedule, simulation, drawings and the torch.distributed version."""

import random
import textwrap

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ddp_helpers.ring import (
    ALL_GATHER,
    REDUCE_SCATTER,
    chunk_bounds,
    expected_elements_sent,
    narrate,
    num_steps,
    recv_chunk,
    ring_schedule,
    send_chunk,
    simulate_ring,
    symbolic_chunks,
    symbolic_states,
    terms,
)
from ddp_helpers.viz.ring_widget import (
    draw_holdings,
    draw_ring_step,
    holdings_text,
    ring_step_figure,
    short_label,
    step_view,
)

SIZES = range(1, 7)


@pytest.mark.parametrize("n", SIZES)
def test_schedule_shape_and_links(n):
    schedule = ring_schedule(n)
    assert len(schedule) == num_steps(n) == 2 * (n - 1)
    for step, transfers in enumerate(schedule):
        assert [t.src for t in transfers] == list(range(n))
        assert [t.dst for t in transfers] == [(r + 1) % n for r in range(n)]
        # every link carries a different chunk: all chunks but one move at once
        assert len({t.chunk for t in transfers}) == n
        assert all(t.phase == (REDUCE_SCATTER if step < n - 1 else ALL_GATHER) for t in transfers)
        # what rank r receives is what the transfer addressed to r (dst == r) carries
        carried = {t.dst: t.chunk for t in transfers}
        assert [recv_chunk(r, step, n) for r in range(n)] == [carried[r] for r in range(n)]
    if n > 1:
        # From the algorithm, not the formula: reduce-scatter ends with rank r receiving the last
        # contribution to chunk r (it then owns chunk r, as dist.reduce_scatter gives rank r), and
        # all-gather starts with every rank sending that reduced chunk of its own.
        assert [recv_chunk(r, n - 2, n) for r in range(n)] == list(range(n))
        assert [send_chunk(r, n - 1, n) for r in range(n)] == list(range(n))


def test_schedule_of_four_ranks_by_hand():
    """N=4, worked out on paper from the A0..D3 picture: in reduce-scatter step s rank r sends the chunk
    it finished adding at step s-1, starting with chunk r-1 (so that chunk r arrives last, complete);
    in all-gather it starts with its own complete chunk r and then forwards what it received."""
    send = [[t.chunk for t in transfers] for transfers in ring_schedule(4)]
    assert send == [[3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0],   # reduce-scatter steps 1..3
                    [0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1]]   # all-gather steps 1..3


@pytest.mark.parametrize("n", range(2, 7))
def test_forward_what_was_received(n):
    """The chunk sent at step s+1 is the chunk received at step s (this is what pipelines)."""
    for step in range(num_steps(n) - 1):
        for r in range(n):
            assert send_chunk(r, step + 1, n) == recv_chunk(r, step, n)


@pytest.mark.parametrize("n", range(2, 7))
def test_each_rank_sends_all_chunks_but_one_per_phase(n):
    for r in range(n):
        rs = [send_chunk(r, s, n) for s in range(n - 1)]
        ag = [send_chunk(r, s, n) for s in range(n - 1, 2 * (n - 1))]
        assert sorted(rs + [r]) == list(range(n))
        assert sorted(ag + [(r + 1) % n]) == list(range(n))


def test_bad_arguments():
    with pytest.raises(ValueError):
        num_steps(0)
    with pytest.raises(ValueError):
        send_chunk(0, 2, 2)  # 2 ranks have steps 0 and 1 only
    with pytest.raises(ValueError):
        simulate_ring([[1, 2], [3]])
    with pytest.raises(ValueError):
        chunk_bounds(-1, 2)


@pytest.mark.parametrize("numel", [0, 1, 2, 3, 7, 10, 101, 1024])
@pytest.mark.parametrize("n", SIZES)
def test_chunk_bounds_match_tensor_split(numel, n):
    x = torch.arange(numel)
    pieces = torch.tensor_split(x, n)
    bounds = chunk_bounds(numel, n)
    assert [(int(p[0]), int(p[-1]) + 1) if len(p) else None for p in pieces] == \
        [(a, b) if b > a else None for a, b in bounds]
    assert [b - a for a, b in bounds] == [len(p) for p in pieces]


@pytest.mark.parametrize("n", range(2, 6))
def test_simulation_sums_every_chunk(n):
    rng = random.Random(n)
    values = [[rng.randint(-100, 100) for _ in range(n)] for _ in range(n)]
    states = simulate_ring(values)
    assert len(states) == num_steps(n) + 1
    totals = [sum(values[r][c] for r in range(n)) for c in range(n)]
    assert all(row == totals for row in states[-1])
    after_rs = states[n - 1]
    assert [after_rs[r][r] for r in range(n)] == totals  # reduce-scatter: rank r owns chunk r
    assert states[0] == values  # the input is not modified


@pytest.mark.parametrize("n", range(2, 6))
def test_simulation_max_and_symbols(n):
    rng = random.Random(10 + n)
    values = [[rng.random() for _ in range(n)] for _ in range(n)]
    final = simulate_ring(values, combine=max)[-1]
    assert all(row == [max(values[r][c] for r in range(n)) for c in range(n)] for row in final)
    names = symbolic_chunks(n)
    for row in symbolic_states(n)[-1]:
        assert [terms(label) for label in row] == [sorted(names[r][c] for r in range(n)) for c in range(n)]


def test_a0_d3_walkthrough():
    states = symbolic_states(4)
    assert states[0][0] == ["A0", "A1", "A2", "A3"]
    # step 1: rank 3 sends D2 to rank 0, which adds it to A2
    assert states[1][0][2] == "D2+A2"
    assert [states[3][r][r] for r in range(4)] == ["B0+C0+D0+A0", "C1+D1+A1+B1", "D2+A2+B2+C2",
                                                   "A3+B3+C3+D3"]
    lines = narrate(4)
    assert len(lines) == 6 * 5
    assert lines[0] == "reduce-scatter step 1:"
    assert lines[1] == "  rank 0 sends chunk 3 (A3) to rank 1, which adds it: A3+B3"
    assert lines[15] == "all-gather step 1:"


@pytest.mark.parametrize("numel", [0, 1, 5, 8, 9, 1000, 1001])
@pytest.mark.parametrize("n", range(2, 6))
def test_expected_bytes_close_to_formula(numel, n):
    sent = [expected_elements_sent(numel, n, r) for r in range(n)]
    # exactly: the sizes of the chunks rank r sends, from the schedule and torch.tensor_split's split
    sizes = [len(p) for p in torch.tensor_split(torch.arange(numel), n)]
    assert sent == [sum(sizes[t.chunk] for step in ring_schedule(n) for t in step if t.src == r)
                    for r in range(n)]
    for r in range(n):
        assert abs(sent[r] - 2 * (n - 1) / n * numel) <= 2
    if numel % n == 0:
        assert all(s == 2 * (n - 1) * numel // n for s in sent)
    assert expected_elements_sent(numel, 1, 0) == 0


@pytest.mark.parametrize("n", [2, 3, 5])
def test_step_view_data(n):
    first = step_view(n, 0)
    assert first.transfers == [] and first.received == set()
    assert all(c == 1 for row in first.counts for c in row)
    assert "before the first step" in first.title
    after_rs = step_view(n, n - 1)
    assert [after_rs.counts[r][r] for r in range(n)] == [n] * n
    last = step_view(n, num_steps(n))
    assert all(c == n for row in last.counts for c in row)
    assert last.title.endswith(f"({ALL_GATHER} step {n - 1}/{n - 1})")
    mid = step_view(n, 1)
    assert mid.received == {((r + 1) % n, send_chunk(r, 0, n)) for r in range(n)}
    with pytest.raises(ValueError):
        step_view(n, num_steps(n) + 1)


def test_short_label():
    assert short_label("A0+B0") == "A0+B0"
    assert short_label("B0+C0+D0+E0") == "B0+C0+D0+E0"
    assert short_label("B0+C0+D0+E0+A0") == "B0+…+A0 (5)"


@pytest.mark.parametrize("n,step", [(2, 0), (4, 3), (5, 7)])
def test_draw_ring_step(n, step):
    fig, ax = plt.subplots()
    view = step_view(n, step)
    draw_ring_step(ax, view)
    texts = [t.get_text() for t in ax.texts]
    assert sorted(texts) == sorted(short_label(label) for row in view.labels for label in row)
    borders = [p for p in ax.patches if not p.get_fill()]
    assert len(borders) == len(view.transfers)
    assert ax.get_title() == view.title
    plt.close(fig)
    fig = ring_step_figure(n, step)
    assert len(fig.axes) == 1
    plt.close(fig)


def arrows_of(ax):
    from matplotlib.patches import FancyArrowPatch

    return [p for p in ax.patches if isinstance(p, FancyArrowPatch)]


@pytest.mark.parametrize("n", [2, 3, 8])
def test_every_arrow_is_inside_the_axes(n):
    """The wrap-around link (rank n-1 -> 0) included: nothing is clipped at any N."""
    for step in sorted({1, n - 1, n, num_steps(n)}):  # both phases, the first and last steps
        fig = ring_step_figure(n, step)
        ax = fig.axes[0]
        fig.canvas.draw()
        box = ax.get_window_extent()
        arrows = arrows_of(ax)
        wraps = sum(t.dst < t.src for t in step_view(n, step).transfers)
        assert wraps == 1 and len(arrows) == n + wraps  # one arrow per link, two for the wrap
        for arrow in arrows:
            extent = arrow.get_window_extent()
            assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, (n, step)
            assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, (n, step)
        plt.close(fig)


@pytest.mark.parametrize("n", range(2, 9))
def test_labels_readable_and_inside_their_cells(n):
    """At 100 dpi every label is >= 9 pt (12.5 px), fits its cell, and the figure fits a notebook."""
    fig = ring_step_figure(n, n - 1)  # the end of reduce-scatter: the longest labels
    width, _ = fig.get_size_inches()
    assert width <= 10.5  # 1050 px at 100 dpi: JupyterLab does not shrink it
    ax = fig.axes[0]
    fig.canvas.draw()
    cell = ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0]
    for text in ax.texts:
        assert text.get_fontsize() >= 9
        assert text.get_window_extent().width < cell, (n, text.get_text())
    tick_sizes = [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert min(tick_sizes) >= 9
    plt.close(fig)


def test_figure_has_a_legend_for_both_phases_and_the_shading():
    from ddp_helpers.viz.ring_widget import PHASE_COLORS

    fig = ring_step_figure(4, 1)
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert any(REDUCE_SCATTER in lbl for lbl in labels) and any(ALL_GATHER in lbl for lbl in labels)
    assert any("own value" in lbl for lbl in labels) and any("all 4 ranks" in lbl for lbl in labels)
    edges = [matplotlib.colors.to_hex(h.get_edgecolor()) for h in legend.legend_handles[:2]]
    assert edges == [matplotlib.colors.to_hex(PHASE_COLORS[p]) for p in (REDUCE_SCATTER, ALL_GATHER)]
    assert "rank 3 sends to rank 0" in legend.get_title().get_text()
    plt.close(fig)


def test_draw_holdings():
    holdings = {"broadcast": {"before": [1.0, 2.0], "after": [1.0, 1.0]},
                "reduce": {"before": [[1.0, 2.0], [3.0, 4.0]], "after": [[4.0, 6.0], None]}}
    fig, axes = plt.subplots(2, 1)
    draw_holdings(axes, holdings)
    assert axes[0].get_title(loc="left") == "broadcast"
    values = [t.get_text() for t in axes[1].texts if t.get_text() and not t.get_text().startswith("rank")]
    assert values == ["[1, 2]", "[3, 4]", "[4, 6]", "-"]
    with pytest.raises(ValueError):
        draw_holdings(axes[:1], holdings)
    plt.close(fig)
    assert holdings_text(2.5) == "2.5" and holdings_text(None) == "-"


def test_ring_stepper_buttons_play_and_n():
    ipywidgets = pytest.importorskip("ipywidgets")
    from ddp_helpers.viz.ring_widget import ring_stepper

    box = ring_stepper(n=3)
    c = box.controls
    assert isinstance(box, ipywidgets.VBox) and c["step"].max == c["play"].max == 4
    assert isinstance(c["play"], ipywidgets.Play) and c["prev"].disabled and not c["next"].disabled
    first = box.png
    c["next"].click()
    assert c["step"].value == 1 and box.view == step_view(3, 1) and box.png != first
    c["prev"].click()
    c["prev"].click()  # clamped at 0
    assert c["step"].value == 0 and c["prev"].disabled
    c["play"].value = 4  # what Play's timer does in the browser: the step follows it
    assert c["step"].value == 4 and c["next"].disabled and box.view.counts == step_view(3, 4).counts
    c["next"].click()
    assert c["step"].value == 4
    c["n"].value = 5
    assert c["step"].max == c["play"].max == 8 and box.view.n == 5
    c["step"].value = 2
    assert c["play"].value == 2
    plt.close("all")


def test_ring_stepper_output_carries_a_png_fallback():
    """A stored notebook shows a picture where no widget renders (untrusted, or a handout)."""
    import base64

    pytest.importorskip("ipywidgets")
    from ddp_helpers.viz.ring_widget import ring_stepper

    box = ring_stepper(n=2)
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == box.png and box.png.startswith(b"\x89PNG")
    assert "run the cell" in bundle["text/plain"] and "VBox(" not in bundle["text/plain"]
    plt.close("all")


WORKER = textwrap.dedent('''
    import torch
    import torch.distributed as dist
    from ddp_helpers.ring import ring_all_reduce, expected_elements_sent
    from ddp_helpers.runtime import distributed

    with distributed() as ctx:
        r, n = ctx.rank, ctx.world_size
        for numel in [0, 1, 2, 3, 7, 1000, 4099]:
            for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG]:
                g = torch.Generator().manual_seed(100 * r + numel)
                x = torch.randint(-9, 9, (numel,), generator=g).double()
                ref = x.clone()
                dist.all_reduce(ref, op=op)
                stats = ring_all_reduce(x, op=op, segment_bytes=64, window=3)
                assert torch.allclose(x, ref), (numel, op)
                assert stats.bytes_sent == 8 * expected_elements_sent(numel, n, r)
        m = torch.arange(12.0).reshape(3, 4).t() * (r + 1)  # not contiguous
        ring_all_reduce(m)
        assert torch.equal(m, torch.arange(12.0).reshape(3, 4).t() * n * (n + 1) / 2)
        sub = dist.new_group([0, 1])  # a subgroup: ranks are translated to global ones
        if r in (0, 1):
            y, ref = torch.full((5,), r + 1.0), torch.full((5,), r + 1.0)
            dist.all_reduce(ref, group=sub)
            ring_all_reduce(y, group=sub)
            assert torch.equal(y, ref) and y[0].item() == 3.0
        print("ring ok")
''')


@pytest.mark.parametrize("nproc", [2, 3])
def test_ring_all_reduce_equals_all_reduce(tmp_path, nproc):
    from ddp_helpers import torchrun

    script = tmp_path / "ring_worker.py"
    script.write_text(WORKER)
    result = torchrun(script, nproc=nproc, live="quiet", summary=False, timeout=120)
    assert all(result.stdout[r] == ["ring ok"] for r in range(nproc))
