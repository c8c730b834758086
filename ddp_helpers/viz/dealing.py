"""DistributedSampler as card dealing: one epoch's global order, each index coloured by its rank.

    from ddp_helpers.viz.dealing import dealing_figure, dealt_cards

The figure is drawn from what torch's ``DistributedSampler`` returned on each rank (``hands``: for
each epoch, the list of every rank's indices), not from a formula: :func:`dealt_cards` only lays
the hands out again in the order they were dealt (position ``p`` went to rank ``p % R``), and marks
the positions past the dataset's end, the padding that repeats indices from the start of the order.
:func:`cards_shown` reads the cards back from a drawn figure, so a notebook can check the picture
against the sampler (notebook 02).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ddp_helpers.viz.figures import blank_axes, print_fontsize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RANK_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


class Card(NamedTuple):
    position: int  # in the epoch's global order
    index: int     # the dataset index dealt there
    rank: int      # position % num_replicas
    padding: bool  # position >= dataset size: a repeat from the start of the order


def dealt_cards(hands: Sequence[Sequence[int]], n: int) -> list[Card]:
    """One epoch's global order rebuilt from every rank's indices (``hands[r]`` = rank r's list):
    position ``k * R + r`` holds ``hands[r][k]``. ``ValueError`` if the hands differ in length."""
    hands = [[int(i) for i in hand] for hand in hands]
    if not hands or len({len(hand) for hand in hands}) != 1:
        raise ValueError(f"every rank must hold the same number of indices: {[len(h) for h in hands]}")
    replicas = len(hands)
    return [Card(k * replicas + r, hand[k], r, k * replicas + r >= n)
            for k in range(len(hands[0])) for r, hand in enumerate(hands)]


def dealing_figure(epochs: Mapping[int, Sequence[Sequence[int]]], n: int) -> Figure:
    """One row of cards per epoch: the global order, each card coloured by the rank it is dealt to,
    padding cards hatched and labelled. ``epochs[e]`` = every rank's indices in epoch ``e``."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    rows = {e: dealt_cards(hands, n) for e, hands in sorted(epochs.items())}
    replicas = len(next(iter(epochs.values())))
    if replicas > len(RANK_COLORS):
        raise ValueError(f"at most {len(RANK_COLORS)} ranks can be told apart by colour")
    length = max(len(cards) for cards in rows.values())
    width = max(7.0, 0.62 * length + 1.9)
    fs = print_fontsize(width, 9.5)
    fig, ax = plt.subplots(figsize=(width, 1.0 + 1.25 * len(rows)))
    top = 1.25 * len(rows)
    blank_axes(ax, (-2.4, length + 0.1), (-0.75, top + 0.1),
               f"{n} samples dealt to {replicas} ranks: position p goes to rank p % {replicas}", fontsize=fs + 1)
    ax.set_xticks([])  # no tick labels: they would print below 8 pt
    ax.set_yticks([])
    for row, (epoch, cards) in enumerate(rows.items()):
        y = top - 1.25 * (row + 1) + 0.25
        label = f"epoch {epoch}" if row == 0 else f"set_epoch({epoch})"
        ax.text(-0.15, y + 0.4, label, ha="right", va="center", fontsize=fs)
        for card in cards:
            ax.add_patch(Rectangle((card.position + 0.05, y), 0.9, 0.8, facecolor=RANK_COLORS[card.rank],
                                   edgecolor="black", hatch="//" if card.padding else None, lw=1,
                                   gid=f"card e{epoch} p{card.position} r{card.rank}"))
            ax.text(card.position + 0.5, y + 0.4, str(card.index), ha="center", va="center", fontsize=fs,
                    color="white", fontweight="bold", gid=f"index e{epoch} p{card.position}")
        padded = [c.position for c in cards if c.padding]
        if padded:
            ax.text((padded[0] + padded[-1] + 1) / 2, y - 0.22, "padding (repeats)", ha="center",
                    va="center", fontsize=fs)
    ax.legend(handles=[Patch(facecolor=RANK_COLORS[r], edgecolor="black", label=f"rank {r}")
                       for r in range(replicas)], loc="upper left", bbox_to_anchor=(0.0, 0.0), ncol=replicas, fontsize=fs, frameon=False)
    fig.tight_layout()
    return fig


def cards_shown(fig: Figure) -> dict[int, dict[int, list[int]]]:
    """Read a :func:`dealing_figure` back: ``{epoch: {rank: [indices in dealing order]}}``, from the
    cards' colours and the numbers drawn on them."""
    ax = fig.axes[0]
    numbers = {t.get_gid(): int(t.get_text()) for t in ax.texts if (t.get_gid() or "").startswith("index ")}
    shown: dict[int, dict[int, list[tuple[int, int]]]] = {}
    for patch in ax.patches:
        gid = patch.get_gid() or ""
        if not gid.startswith("card "):
            continue
        epoch, position = (int(part[1:]) for part in gid.split()[1:3])
        face = tuple(round(c, 3) for c in patch.get_facecolor()[:3])
        rank = next(r for r, color in enumerate(RANK_COLORS) if _rgb(color) == face)
        shown.setdefault(epoch, {}).setdefault(rank, []).append((position, numbers[f"index e{epoch} p{position}"]))
    return {e: {r: [i for _, i in sorted(cards)] for r, cards in sorted(ranks.items())}
            for e, ranks in sorted(shown.items())}


def _rgb(color: str) -> tuple[float, ...]:
    from matplotlib.colors import to_rgb

    return tuple(round(c, 3) for c in to_rgb(color))
