"""Mixture of experts in one process, and expert parallelism written by hand.

    from ddp_helpers.experts import MoE, expert_parallel, route, capacity

A mixture-of-experts (MoE) layer replaces one feed-forward block by ``E`` of them, the *experts*,
and a *router*: a linear layer that scores every token against every expert. Each token goes to its
top-k experts; their outputs, weighted by the router's probabilities, are added to the token (the
residual). Each expert takes at most ``capacity`` tokens of a batch; the assignments beyond it are
*dropped*, and a token whose every assignment was dropped passes through the residual alone.

- :func:`route` picks the experts (top-1 or top-2), their weights and which assignments fit.
- :func:`load_balancing_loss` is the Switch Transformer's auxiliary loss, E · Σ_e f_e · P_e.
- :class:`MoE` is the layer in one process; :func:`expert_parallel` is the same layer with its
  experts sharded over the ranks of a group: the count exchange, the dispatch all-to-all (uneven
  splits, or padded to capacity), the experts' work and the combine all-to-all, all differentiable
  (torch's functional ``all_to_all_single``, whose backward is the all-to-all with the splits reversed).
- :func:`update_bias` is loss-free balancing as torchtitan does it (``load_balance_coeff``): a
  per-expert bias added to the router's scores for the choice only, moved by the sign of each
  expert's load deviation, without a gradient.

Tokens are rows of a (tokens, dim) tensor; an expert is ``relu(x @ w1[e]) @ w2[e]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed import _functional_collectives as funcol


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Slots per expert for a batch of ``tokens``: ceil(factor · tokens · k / E) (GShard, Switch)."""
    return math.ceil(factor * tokens * top_k / experts)


@dataclass
class Routing:
    """Where a batch's tokens go. ``experts`` and ``weights`` are (tokens, k): the chosen experts in
    order of preference and the weights of their outputs; ``keep`` (tokens, k) says which assignments
    fit their expert's capacity; ``probs`` (tokens, E) the router's softmax."""

    experts: torch.Tensor
    weights: torch.Tensor
    keep: torch.Tensor
    probs: torch.Tensor

    @property
    def num_experts(self) -> int:
        return self.probs.shape[1]

    def load(self, kept_only: bool = True) -> torch.Tensor:
        """Assignments per expert (kept ones only, by default), as int64."""
        chosen = self.experts[self.keep] if kept_only else self.experts.flatten()
        return torch.bincount(chosen, minlength=self.num_experts)

    def dropped_tokens(self) -> torch.Tensor:
        """Indices of the tokens none of whose assignments fit: they leave as they came."""
        return (~self.keep.any(dim=1)).nonzero().flatten()


def route(logits: torch.Tensor, top_k: int = 1, cap: int | None = None,
          bias: torch.Tensor | None = None) -> Routing:
    """Top-k routing of ``logits`` (tokens, E), ties to the lower expert. ``bias`` (E,) is added to the
    softmax scores for the choice only (loss-free balancing); the weights are the unbiased probabilities of the chosen experts,
    renormalised to sum to 1 when k > 1. Capacity: first choices are served before second choices,
    each in token order; an expert's assignments beyond ``cap`` are dropped (None: no limit)."""
    probs = torch.softmax(logits, dim=-1)
    # the choice: by the logits (the softmax keeps their order), or by the biased scores; equal scores go
    # to the lower expert (a stable sort), so every machine breaks ties alike
    choice = logits if bias is None else probs + bias
    experts = choice.detach().sort(dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = probs.gather(1, experts)
    if top_k > 1:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    keep = torch.ones_like(experts, dtype=torch.bool)
    if cap is not None:
        by_priority = experts.t().reshape(-1)                  # all first choices, then all second choices
        one_hot = F.one_hot(by_priority, probs.shape[1])
        position = (one_hot.cumsum(0) - 1).gather(1, by_priority[:, None]).flatten()
        keep = (position < cap).reshape(top_k, -1).t()
    return Routing(experts, weights, keep, probs)


def load_balancing_loss(routing: Routing) -> torch.Tensor:
    """Switch Transformer's auxiliary loss: E · Σ_e f_e · P_e, with f_e the fraction of assignments
    routed to expert e (all k choices, before capacity) and P_e the mean router probability of e.
    1 when both are uniform; E when every token goes to one expert with probability 1. Only P_e has
    a gradient."""
    e = routing.num_experts
    f = routing.load(kept_only=False).to(routing.probs.dtype) / routing.experts.numel()
    return e * (f * routing.probs.mean(dim=0)).sum()


def update_bias(bias: torch.Tensor, load: torch.Tensor, coeff: float) -> torch.Tensor:
    """torchtitan's loss-free update: bias += coeff · sign(mean load - load), centred to mean 0.
    Overloaded experts go down, idle ones up; no gradient. Returns the new bias."""
    load = load.to(bias.dtype)
    delta = coeff * torch.sign(load.mean() - load)
    return bias + (delta - delta.mean())


def expert_ffn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: relu(x @ w1) @ w2 (no biases, so an empty or zero row gives zero)."""
    return torch.relu(x @ w1) @ w2


class MoE(nn.Module):
    """A mixture-of-experts layer in one process: ``x + Σ_k keep · weight · expert(x)``.

    ``forward(x, cap=None, bias=None)`` returns ``(y, routing)``; the auxiliary loss is
    ``load_balancing_loss(routing)``. Weights are seeded (``seed``), the same in every process.
    """

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int = 1, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.top_k = top_k
        # the router's weights are multiples of 1/8 and inputs (see tokens()) multiples of 1/4: the
        # logits are exact on every CPU, so every machine routes every token alike
        self.router = nn.Parameter(torch.randint(-4, 5, (dim, experts), generator=g) / 8)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden, generator=g) / dim**0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim, generator=g) / hidden**0.5)
        self.first = 0  # the first expert this module holds (shard() moves it)

    @property
    def num_experts(self) -> int:
        """Experts the router chooses among (all of them, also after :meth:`shard`)."""
        return self.router.shape[1]

    def shard(self, rank: int, world: int) -> MoE:
        """Keep only experts rank·E/N … (rank+1)·E/N − 1, as a rank of expert parallelism does; returns self."""
        local = self.num_experts // world
        self.first = rank * local
        self.w1 = nn.Parameter(self.w1.detach()[self.first:self.first + local].clone())
        self.w2 = nn.Parameter(self.w2.detach()[self.first:self.first + local].clone())
        return self

    def forward(self, x: torch.Tensor, cap: int | None = None,
                bias: torch.Tensor | None = None) -> tuple[torch.Tensor, Routing]:
        assert self.w1.shape[0] == self.num_experts, "a sharded MoE runs through expert_parallel()"
        routing = route(x @ self.router, self.top_k, cap, bias)
        y = x
        for e in range(self.num_experts):
            tok, slot = ((routing.experts == e) & routing.keep).nonzero(as_tuple=True)
            out = expert_ffn(x[tok], self.w1[e], self.w2[e]) * routing.weights[tok, slot, None]
            y = y.index_add(0, tok, out)
        return y, routing


def tokens(n: int, dim: int, seed: int) -> torch.Tensor:
    """``n`` tokens of width ``dim``, multiples of 1/4 in [-1, 1] (exact logits with :class:`MoE`)."""
    return torch.randint(-4, 5, (n, dim), generator=torch.Generator().manual_seed(seed)) / 4


# --- expert parallelism ------------------------------------------------------------------------------

@dataclass
class A2ATraffic:
    """Bytes this rank's all-to-alls move: ``sent`` leave for other ranks (by pass), ``payload`` is
    every input, the own block included (what ``CommCounter`` counts), ``flow`` the tokens this rank
    sent to each rank in the dispatch."""

    sent: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    payload: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    flow: list[int] = field(default_factory=list)


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: dist.ProcessGroup,
         traffic: A2ATraffic | None) -> torch.Tensor:
    """The differentiable all-to-all: rows ``in_splits[j]`` go to rank j; its backward sends the
    gradient back with the splits reversed."""
    me, row = dist.get_rank(group), math.prod(x.shape[1:]) * x.element_size()   # bytes per row
    out = funcol.wait_tensor(funcol.all_to_all_single(x.contiguous(), out_splits, in_splits, group))
    if traffic is not None:
        traffic.sent["forward"] += (sum(in_splits) - in_splits[me]) * row
        traffic.payload["forward"] += sum(in_splits) * row
        if out.requires_grad:   # the backward all-to-all sends what this rank received
            def count(grad: torch.Tensor) -> None:
                traffic.sent["backward"] += (sum(out_splits) - out_splits[me]) * row
                traffic.payload["backward"] += sum(out_splits) * row
            out.register_hook(count)
    return out


def expert_parallel(moe: MoE, x: torch.Tensor, cap: int | None = None, group: dist.ProcessGroup | None = None,
                    padded: bool = False, traffic: A2ATraffic | None = None) -> tuple[torch.Tensor, Routing]:
    """``moe`` on this rank's tokens ``x`` with the experts sharded over ``group``: rank r holds and
    computes experts r·E/N … (r+1)·E/N − 1 (``moe.shard(r, N)``), for the tokens of every rank. The router and the residual stay local. Returns ``(y, routing)`` as ``moe(x, cap)``.

    Uneven (default): an all-to-all of counts tells each rank how many rows to expect from each
    other rank and expert, then the kept assignments travel, grouped by expert. ``padded=True`` (needs
    ``cap``): every expert gets exactly ``cap`` rows from every rank, empty slots zero, so every
    all-to-all is even and its size is known without a count exchange (GShard's layout)."""
    group = group or dist.group.WORLD
    world, me = dist.get_world_size(group), dist.get_rank(group)
    e_all, dim = moe.num_experts, x.shape[1]
    local = e_all // world
    assert moe.w1.shape[0] == local and moe.first == me * local, "call moe.shard(rank, world) first"
    routing = route(x @ moe.router, moe.top_k, cap, None)
    tok, slot = routing.keep.nonzero(as_tuple=True)
    expert = routing.experts[tok, slot]
    order = torch.argsort(expert, stable=True)                 # kept assignments grouped by expert
    tok, slot, expert = tok[order], slot[order], expert[order]
    counts = torch.bincount(expert, minlength=e_all)           # rows for each expert, from this rank
    if padded:
        assert cap is not None, "padded dispatch needs a capacity"
        rank_in_expert = torch.arange(len(expert), device=x.device) - (counts.cumsum(0) - counts)[expert]
        send = x.new_zeros(e_all * cap, dim).index_put((expert * cap + rank_in_expert,), x[tok])
        splits = [local * cap] * world
        got = _a2a(send, splits, splits, group, traffic)       # (world · local · cap, dim): by source
        h = got.reshape(world, local, cap, dim).transpose(0, 1).reshape(local, world * cap, dim)
        out = torch.bmm(torch.relu(torch.bmm(h, moe.w1)), moe.w2)   # every local expert on all its slots
        out = out.reshape(local, world, cap, dim).transpose(0, 1).reshape(world * local * cap, dim)
        back = _a2a(out, splits, splits, group, traffic)[expert * cap + rank_in_expert]
    else:
        in_splits = counts.reshape(world, local).sum(1).tolist()
        recv_counts = funcol.wait_tensor(funcol.all_to_all_single(counts, None, None, group))
        recv_counts = recv_counts.reshape(world, local)        # [source rank, my local expert]
        out_splits = recv_counts.sum(1).tolist()
        got = _a2a(x[tok], out_splits, in_splits, group, traffic)
        owner = torch.arange(local, device=x.device).repeat(world).repeat_interleave(recv_counts.flatten())
        out = torch.zeros_like(got)
        for e in range(local):
            rows = (owner == e).nonzero().flatten()
            out = out.index_put((rows,), expert_ffn(got[rows], moe.w1[e], moe.w2[e]))
        back = _a2a(out, in_splits, out_splits, group, traffic)
    if traffic is not None and not traffic.flow:
        traffic.flow = counts.reshape(world, local).sum(1).tolist()
    y = x.index_add(0, tok, back * routing.weights[tok, slot, None])
    return y, routing


def token_flow(per_rank_experts: list[torch.Tensor], per_rank_keep: list[torch.Tensor], world: int,
               experts: int) -> torch.Tensor:
    """(world, world) matrix of kept assignments rank i sends to rank j, from each rank's routing."""
    flow = torch.zeros(world, world, dtype=torch.long)
    for i, (ex, keep) in enumerate(zip(per_rank_experts, per_rank_keep, strict=True)):
        flow[i] = torch.bincount(ex[keep] // (experts // world), minlength=world)
    return flow
