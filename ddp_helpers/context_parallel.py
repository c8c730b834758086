"""Context (sequence) parallelism written by hand: ring attention and Ulysses.

    from ddp_helpers.context_parallel import block_attention, merge, ring_attention, ulysses_attention

Every rank holds a slice of the sequence. Attention needs every query to see every key, so the
ranks exchange something:

- **Ring attention** keeps the queries in place and passes the key/value blocks around a ring of
  ranks: after N - 1 hops every rank has seen every block. Each block gives a *partial* attention
  (softmax over that block's keys only) and its log-sum-exp; :func:`merge` combines partials into
  the softmax over all keys seen so far, exactly.
- **Ulysses** swaps the sharded dimension with one all-to-all: from a slice of the sequence with all
  heads to the whole sequence with a slice of the heads; attention runs per head, whole; a second
  all-to-all swaps back.

Sequences are laid out on the ranks ``"contiguous"`` (rank r holds block r) or ``"zigzag"`` (the
sequence cut in 2N chunks, rank r holds chunks r and 2N - 1 - r), which balances causal work.
Tensors are (batch, heads, sequence, head_dim); positions are global token indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol

LAYOUTS = ("contiguous", "zigzag")


# --- one process: partial attention and the log-sum-exp merge ----------------------------------------

def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor | None = None,
                    k_pos: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` over the keys ``k`` only: (output, log-sum-exp of the scores per query).

    With positions, key j is hidden from query i when ``k_pos[j] > q_pos[i]`` (causal). A query that
    sees no key of the block gets output 0 and log-sum-exp -inf, with gradients kept finite.
    """
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if q_pos is None:
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        return torch.exp(scores - lse) @ v, lse
    hidden = k_pos[None, :] > q_pos[:, None]
    blind = hidden.all(dim=-1, keepdim=True)            # rows without any visible key
    scores = scores.masked_fill(hidden & ~blind, float("-inf"))  # blind rows stay finite (no NaN)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    out = torch.exp(scores - lse) @ v
    return torch.where(blind, 0.0, out), torch.where(blind, float("-inf"), lse)


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
          lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two partial attentions over disjoint key sets -> the attention over their union.

    softmax over A ∪ B = exp(lse_A - lse) · softmax over A + exp(lse_B - lse) · softmax over B,
    with lse = log(exp(lse_A) + exp(lse_B)). At least one of the two must see a key (finite lse).
    """
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


# --- layouts and causal work ---------------------------------------------------------------------------

def positions(layout: str, seq_len: int, world: int, rank: int) -> torch.Tensor:
    """The global token indices rank ``rank`` holds, in order."""
    if layout == "contiguous":
        if seq_len % world:
            raise ValueError(f"seq_len {seq_len} does not split evenly over {world} ranks")
        size = seq_len // world
        return torch.arange(rank * size, (rank + 1) * size)
    if layout == "zigzag":
        if seq_len % (2 * world):
            raise ValueError(f"zigzag needs seq_len {seq_len} divisible by 2 x {world}")
        chunks = torch.arange(seq_len).chunk(2 * world)
        return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]])
    raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")


def causal_pairs(layout: str, seq_len: int, world: int) -> list[int]:
    """Per rank, the (query, key) pairs a causal mask leaves visible for its queries: its work."""
    out = []
    for rank in range(world):
        q = positions(layout, seq_len, world, rank)
        out.append(int((q + 1).sum()))                  # query i sees keys 0..i
    return out


def chunk_owners(layout: str, world: int) -> torch.Tensor:
    """A (2N x 2N) map over chunks of the sequence: entry (query chunk, key chunk) is the rank that
    computes it under a causal mask, -1 where the mask hides it entirely."""
    n = 2 * world
    owners = torch.full((n, n), -1)
    for rank in range(world):
        mine = positions(layout, n, world, rank)         # one token per chunk: chunk indices
        for qc in mine.tolist():
            owners[qc, : qc + 1] = rank
    return owners


# --- ring attention across ranks ------------------------------------------------------------------------

@dataclass
class Traffic:
    """Bytes this rank sent, counted where it sends."""
    forward: int = 0
    backward: int = 0


def _shift(x: torch.Tensor, to: int, frm: int, group: dist.ProcessGroup | None) -> torch.Tensor:
    """Send ``x`` to rank ``to`` and receive a tensor like it from rank ``frm``."""
    received = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x.contiguous(), to, group), dist.P2POp(dist.irecv, received, frm, group)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


def _neighbours(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """The global ranks of the next and the previous rank on the ring."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    ring = list(range(world)) if group is None else [dist.get_global_rank(group, r) for r in range(world)]
    return ring[(rank + 1) % world], ring[(rank - 1) % world]


class RingHop(torch.autograd.Function):
    """One hop of the ring: forward sends to the next rank and receives from the previous one;
    backward sends the gradient back the other way (to the rank the block came from)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None, traffic: Traffic | None) -> torch.Tensor:
        ctx.group, ctx.traffic = group, traffic
        nxt, prev = _neighbours(group)
        if traffic is not None:
            traffic.forward += x.numel() * x.element_size()
        return _shift(x.detach(), nxt, prev, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        nxt, prev = _neighbours(ctx.group)
        if ctx.traffic is not None:
            ctx.traffic.backward += grad.numel() * grad.element_size()
        return _shift(grad.contiguous(), prev, nxt, ctx.group), None, None


def ring_pass(x: torch.Tensor, group: dist.ProcessGroup | None = None, traffic: Traffic | None = None,
              differentiable: bool = True) -> torch.Tensor:
    """``x`` moves one rank along the ring. ``differentiable=False`` is the trap: the received
    block is a plain tensor, so no gradient flows back to the rank that owns it."""
    if differentiable:
        return RingHop.apply(x, group, traffic)
    if traffic is not None:
        traffic.forward += x.numel() * x.element_size()
    nxt, prev = _neighbours(group)
    return _shift(x.detach(), nxt, prev, group)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layout: str = "contiguous",
                   causal: bool = False, group: dist.ProcessGroup | None = None, traffic: Traffic | None = None,
                   differentiable: bool = True, skip_hidden: bool = False) -> tuple[torch.Tensor, list[int]]:
    """This rank's attention output for its queries over the whole sequence, and the visible
    (query, key) pairs it computed at each step. ``skip_hidden`` leaves out blocks the causal mask
    hides entirely (the forward still passes them on: the ring must keep moving)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    seq_len = q.shape[2] * world
    q_pos = positions(layout, seq_len, world, rank).to(q.device) if causal else None
    kv, out, lse, work = torch.stack([k, v]), None, None, []
    for step in range(world):
        src = (rank - step) % world                       # whose block this rank holds now
        k_pos = positions(layout, seq_len, world, src).to(q.device) if causal else None
        hidden = causal and bool((k_pos[None, :] > q_pos[:, None]).all())
        if not (skip_hidden and hidden):
            part_out, part_lse = block_attention(q, kv[0], kv[1], q_pos, k_pos)
            out, lse = (part_out, part_lse) if out is None else merge(out, lse, part_out, part_lse)
            seen = (k_pos[None, :] <= q_pos[:, None]).sum() if causal else q.shape[2] * kv.shape[3]
            work.append(int(seen))
        else:
            work.append(0)
        if step < world - 1:
            kv = ring_pass(kv, group, traffic, differentiable)
    return out, work


def count_nodes(output: torch.Tensor, name: str) -> int:
    """How many autograd nodes called ``name`` the backward of ``output`` would run."""
    seen, stack, found = set(), [output.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        found += type(node).__name__ == name
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


# --- Ulysses: all-to-all between sequence and head sharding -------------------------------------------

def _all_to_all(x: torch.Tensor, group: dist.ProcessGroup | None, functional: bool,
                traffic: Traffic | None = None) -> torch.Tensor:
    """Block j of dimension 0 goes to rank j; the result's block i came from rank i. ``functional``
    uses the autograd-aware functional collective; otherwise plain ``dist.all_to_all_single``."""
    x = x.contiguous()
    leaving = x.numel() * x.element_size() * (x.shape[0] - 1) // x.shape[0]  # the own block stays
    if traffic is not None:
        traffic.forward += leaving
    if not functional:
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out
    out = funcol.wait_tensor(funcol.all_to_all_single(x, None, None, group or dist.group.WORLD))
    if traffic is not None and out.requires_grad:   # its backward is the reverse all-to-all
        out.register_hook(lambda grad: setattr(traffic, "backward", traffic.backward + leaving))
    return out


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup | None = None, functional: bool = True,
                 traffic: Traffic | None = None) -> torch.Tensor:
    """(B, H, S/N, D) sequence shard -> (B, H/N, S, D) head shard, whole sequence."""
    world = dist.get_world_size(group)
    b, h, s, d = x.shape
    if h % world:
        raise ValueError(f"{h} heads do not split evenly over {world} ranks")
    parts = x.reshape(b, world, h // world, s, d).transpose(0, 1)   # (N, B, H/N, S/N, D): by head group
    got = _all_to_all(parts, group, functional, traffic)            # block i: sequence block i
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * s, d)


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup | None = None, functional: bool = True,
                 traffic: Traffic | None = None) -> torch.Tensor:
    """(B, H/N, S, D) head shard -> (B, H, S/N, D) sequence shard: the inverse of :func:`seq_to_heads`."""
    world = dist.get_world_size(group)
    b, hn, s, d = x.shape
    parts = x.reshape(b, hn, world, s // world, d).permute(2, 0, 1, 3, 4)  # (N, B, H/N, S/N, D): by seq block
    got = _all_to_all(parts, group, functional, traffic)                   # block i: head group i
    return got.transpose(0, 1).reshape(b, world * hn, s // world, d)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                      group: dist.ProcessGroup | None = None, functional: bool = True,
                      traffic: Traffic | None = None) -> torch.Tensor:
    """Attention of a contiguous sequence shard: all-to-all to heads, whole-sequence SDPA, back."""
    qh, kh, vh = (seq_to_heads(t, group, functional, traffic) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    return heads_to_seq(out, group, functional, traffic)


# --- memory: what attention keeps for backward --------------------------------------------------------

def saved_score_bytes(fn: Callable[[], torch.Tensor], head_dim: int) -> int:
    """Bytes of the score-shaped tensors (batch, heads, queries, keys: neither of the last two is
    ``head_dim`` or 1) that autograd saves while ``fn()`` runs, each tensor counted once: the part of
    attention's activation memory that grows with the sequence length squared."""
    seen: dict[tuple[int, tuple[int, ...]], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() and t.dim() == 4 and not {t.shape[-1], t.shape[-2]} & {head_dim, 1}:
            seen[(t.data_ptr(), tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
