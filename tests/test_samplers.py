"""Unit tests for ddp_helpers.samplers: the sampler arithmetic, exact evaluation, the explorer."""

import itertools

import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import samplers as S
from ddp_helpers.viz import sampler_explorer as SE
from ddp_helpers.viz.figures import show_figure

GRID = list(itertools.product([1, 2, 5, 7, 10, 12], [1, 2, 3, 4, 8], [False, True], [False, True]))


def torch_indices(n, r, rank, drop_last, shuffle, seed=0, epoch=0):
    sampler = DistributedSampler(range(n), num_replicas=r, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler), len(sampler), sampler.total_size


@pytest.mark.parametrize("n,r,drop_last,shuffle", GRID)
def test_arithmetic_matches_torch(n, r, drop_last, shuffle):
    if drop_last and n < r:
        pytest.skip("torch yields nothing per rank here; covered below")
    for rank in range(r):
        idx, length, total = torch_indices(n, r, rank, drop_last, shuffle, seed=3, epoch=2)
        assert S.num_samples(n, r, drop_last) == length
        assert S.total_size(n, r, drop_last) == total
        assert S.rank_indices(n, r, rank, shuffle=shuffle, seed=3, epoch=2, drop_last=drop_last) == idx


def test_drop_last_smaller_than_replicas_gives_empty_ranks():
    assert S.num_samples(2, 4, drop_last=True) == 0
    assert torch_indices(2, 4, 0, True, False)[0] == [] == S.rank_indices(2, 4, 0, drop_last=True)


def test_padding_repeats_from_the_start_and_sign():
    assert S.global_order(5, 4, shuffle=False) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert S.padding_size(5, 4) == 3 and S.padding_size(5, 4, drop_last=True) == -1
    assert S.global_order(2, 5, shuffle=False) == [0, 1, 0, 1, 0]  # cyclic when padding > n


def test_arithmetic_rejects_bad_arguments():
    with pytest.raises(ValueError):
        S.num_samples(0, 2)
    with pytest.raises(ValueError):
        S.rank_indices(4, 2, 2)


@pytest.mark.parametrize("n,r", [(1, 1), (7, 3), (10, 4), (12, 3), (3, 5)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_unpadded_sampler_covers_each_index_once(n, r, shuffle):
    parts = [list(S.UnpaddedDistributedSampler(n, r, rank, shuffle=shuffle, seed=1)) for rank in range(r)]
    assert sorted(itertools.chain(*parts)) == list(range(n))
    # reference: numpy's near-even split (the first n % r ranks get one more), not the package's count
    counts = [len(a) for a in np.array_split(np.arange(n), r)]
    assert [len(p) for p in parts] == counts == S.unpadded_counts(n, r)
    assert [len(S.UnpaddedDistributedSampler(list(range(n)), r, k)) for k in range(r)] == counts


def test_unpadded_sampler_shuffle_follows_torch_permutation_and_epoch():
    a = S.UnpaddedDistributedSampler(10, 2, 0, shuffle=True, seed=5)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(5)).tolist()
    assert list(a) == perm[0::2]
    a.set_epoch(1)
    assert list(a) == torch.randperm(10, generator=torch.Generator().manual_seed(6)).tolist()[0::2]


def test_deduplicate_removes_padded_repeats():
    idx = torch.tensor([3, 0, 1, 3, -1, 2])
    val = torch.tensor([30.0, 0.0, 10.0, 30.0, 99.0, 20.0])
    u, v = S.deduplicate(idx, val)
    assert u.tolist() == [0, 1, 2, 3] and v.tolist() == [0.0, 10.0, 20.0, 30.0]
    u2, v2 = S.deduplicate(idx, torch.stack([val, -val], 1))
    assert v2.shape == (4, 2) and v2[:, 1].tolist() == [-0.0, -10.0, -20.0, -30.0]
    with pytest.raises(ValueError):
        S.deduplicate(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError):
        S.deduplicate(torch.tensor([1, 2]), torch.tensor([1.0]))


def test_deduplicate_of_padded_sampler_equals_dataset():
    n, r = 10, 4
    values = torch.arange(n) * 2
    gathered = [i for rank in range(r) for i in torch_indices(n, r, rank, False, True, seed=2)[0]]
    u, v = S.deduplicate(gathered, values[gathered])
    assert len(gathered) == 12 and u.tolist() == list(range(n)) and torch.equal(v, values)


def test_all_gather_deduplicated_single_process_group(single_rank_group):
    u, v = S.all_gather_deduplicated(torch.tensor([2, 0, 2]), torch.tensor([[2, 2], [0, 0], [2, 2]]))
    assert u.tolist() == [0, 2] and v.tolist() == [[0, 0], [2, 2]]
    assert len(S.UnpaddedDistributedSampler(5)) == 5  # world size and rank from the group


@pytest.mark.parametrize("n,r,drop_last,shuffle", GRID)
def test_sampler_grid_marks_duplicates_and_dropped(n, r, drop_last, shuffle):
    g = S.sampler_grid(n, r, drop_last=drop_last, shuffle=shuffle, seed=1, epoch=3)
    _, length, total = torch_indices(n, r, 0, drop_last, shuffle, 1, 3)  # torch's sizes are the reference
    assert g.grid.shape == (r, length)
    for rank in range(r):
        assert g.grid[rank].tolist() == torch_indices(n, r, rank, drop_last, shuffle, 1, 3)[0]
    assert int(g.duplicate.sum()) == max(total - n, 0)
    assert len(g.dropped) == max(n - total, 0)
    seen = set(g.grid[~g.duplicate].tolist())
    assert len(seen) == int((~g.duplicate).sum())  # first copies are distinct
    assert seen | set(g.dropped) == set(range(n)) and not seen & set(g.dropped)


def test_sampler_grid_unshuffled_layout():
    g = S.sampler_grid(5, 2, shuffle=False)
    assert g.grid.tolist() == [[0, 2, 4], [1, 3, 0]]
    assert g.duplicate.tolist() == [[False, False, False], [False, False, True]]
    g = S.sampler_grid(5, 2, shuffle=False, drop_last=True)
    assert g.grid.tolist() == [[0, 2], [1, 3]] and g.dropped == (4,)


def test_draw_sampler_grid_colours_cells():
    from matplotlib.colors import to_hex
    g = S.sampler_grid(5, 2, shuffle=False)
    fig = SE.draw_sampler_grid(g)
    ax = fig.axes[0]
    colours = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert colours.count(SE.COLORS["duplicate"]) == 1 and colours.count(SE.COLORS["sample"]) == 5
    assert sorted(t.get_text() for t in ax.texts) == sorted("024130")
    plt.close(fig)
    fig = SE.draw_sampler_grid(S.sampler_grid(5, 2, shuffle=False, drop_last=True))
    colours = [to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    assert colours.count(SE.COLORS["dropped"]) == 1
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0", "rank 1", "dropped"]
    plt.close(fig)
    wide = SE.draw_sampler_grid(S.sampler_grid(40, 1))  # 40 cells in 14 in: labels still fit (about 9 pt)
    assert len(wide.axes[0].texts) == 40 and wide.axes[0].texts[0].get_fontsize() >= 6
    plt.close(wide)
    big = SE.draw_sampler_grid(S.sampler_grid(64, 1))  # cells too small for a 6 pt label: no text
    assert len(big.axes[0].texts) == 0
    plt.close(big)


def test_show_figure_returns_png_and_closes():
    fig = SE.draw_sampler_grid(S.sampler_grid(4, 2))
    png = show_figure(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(fig.number)


def test_explorer_recomputes_on_change():
    box = SE.sampler_explorer(n=10, num_replicas=3)
    assert box.data.grid.shape == (3, 4)
    box.controls["drop_last"].value = True
    assert box.data.grid.shape == (3, 3) and box.data.dropped and box.data.drop_last
    box.controls["num_replicas"].value = 5
    assert box.data.grid.shape == (5, 2) and box.data.dropped == ()
    before = box.data.grid.copy()
    box.controls["epoch"].value = 1
    assert (box.data.grid != before).any()
    plt.close("all")


def test_grid_summary_explains_an_empty_grid():
    empty = S.sampler_grid(3, 4, drop_last=True)
    assert empty.num_samples == 0 and empty.dropped == (0, 1, 2)
    text = S.grid_summary(empty)
    assert "0 samples" in text and "floor(3 / 4) = 0" in text and "all 3 samples are dropped" in text
    assert S.grid_summary(S.sampler_grid(10, 4)) == "Each of the 4 ranks gets 3 samples; 2 padded repeats, 0 dropped."
    fig = SE.draw_sampler_grid(empty)
    assert any("0 samples per rank" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)


def test_explorer_sentence_narrow_seed_and_png_fallback():
    import base64

    box = SE.sampler_explorer(n=10, num_replicas=4)
    # ceil(10 / 4) = 3 samples per rank, 4 * 3 - 10 = 2 padded repeats
    assert box.summary.value == "Each of the 4 ranks gets 3 samples; 2 padded repeats, 0 dropped."
    box.controls["n"].value = 3
    box.controls["drop_last"].value = True  # n < replicas with drop_last: nothing to show
    summary = box.summary.value
    assert box.data.num_samples == 0 and summary.startswith("<b>Every rank gets 0 samples") and summary.endswith("</b>")
    assert "floor(3 / 4) = 0" in summary and "all 3 samples are dropped" in summary
    assert box.controls["seed"].layout.width == "9em"
    bundle = box._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == box.png and box.png.startswith(b"\x89PNG")
    assert "application/vnd.jupyter.widget-view+json" in bundle and "run the cell" in bundle["text/plain"]
    plt.close("all")


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("workers", [0, 2])
def test_range_stream_every_item_once(world, workers):
    n = 11
    seen = []
    for rank in range(world):
        loader = DataLoader(S.RangeStream(n, rank, world), batch_size=None, num_workers=workers)
        seen += [int(x) for x in loader]
    assert sorted(seen) == list(range(n))


def test_range_stream_unsharded_repeats_per_worker():
    loader = DataLoader(S.RangeStream(5, shard=False), batch_size=None, num_workers=2)
    assert sorted(int(x) for x in loader) == sorted(list(range(5)) * 2)


def test_noisy_index_reports_worker_seed():
    gen = torch.Generator().manual_seed(7)
    base = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(7)).item()
    loader = DataLoader(S.NoisyIndex(4), batch_size=2, num_workers=2, generator=gen)
    seeds = sorted({int(s) for _, batch_seeds, _ in loader for s in batch_seeds})
    assert seeds == [base, base + 1]
    assert S.NoisyIndex(3)[1][:2] == (1, -1)
