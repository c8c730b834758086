"""Notebook 02's card-dealing figure (ddp_helpers.viz.dealing) shows what DistributedSampler returns."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from torch.utils.data import DistributedSampler

import ddp_helpers.viz  # noqa: F401
from ddp_helpers.viz.dealing import cards_shown, dealing_figure, dealt_cards


def hands(n, replicas, epoch, **kw):
    out = []
    for rank in range(replicas):
        sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank, seed=0, **kw)
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


@pytest.mark.parametrize(("n", "replicas"), [(10, 3), (10, 4), (9, 3), (3, 8), (12, 5)])
def test_figure_reads_back_as_the_samplers_lists(n, replicas):
    epochs = {e: hands(n, replicas, e) for e in (0, 1)}
    fig = dealing_figure(epochs, n)
    try:
        assert cards_shown(fig) == {e: dict(enumerate(h)) for e, h in epochs.items()}
    finally:
        plt.close(fig)


def test_order_and_padding_are_torchs():
    cards = dealt_cards(hands(10, 3, 0, shuffle=False), 10)
    assert [c.index for c in cards] == [*range(10), 0, 1]          # padded from the start of the order
    assert [c.position for c in cards if c.padding] == [10, 11]
    assert [c.rank for c in cards] == [p % 3 for p in range(12)]
    assert not any(c.padding for c in dealt_cards(hands(10, 3, 0, drop_last=True), 10))


def test_uneven_hands_are_refused():
    with pytest.raises(ValueError):
        dealt_cards([[0, 1], [2]], 3)
