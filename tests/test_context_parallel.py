"""ddp_helpers.context_parallel: the log-sum-exp merge, layouts and causal work in one process; ring
attention and Ulysses on 4 ranks (neighbours differ, unlike 2 ranks) against full attention."""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

from ddp_helpers.context_parallel import (
    block_attention,
    causal_pairs,
    chunk_owners,
    merge,
    positions,
    saved_score_bytes,
)

TOL = 2e-6


def qkv(seq=12, heads=2, dim=6, grad=False):
    torch.manual_seed(0)
    return [torch.randn(1, heads, seq, dim, requires_grad=grad) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
def test_merging_blocks_in_any_order_is_full_attention(causal):
    q, k, v = qkv()
    pos = torch.arange(12)
    blocks = list(zip(k.split([2, 7, 3], dim=2), v.split([2, 7, 3], dim=2), pos.split([2, 7, 3]), strict=True))
    out = lse = None
    for kb, vb, kp in (blocks[2], blocks[0], blocks[1]):
        part = block_attention(q, kb, vb, pos, kp) if causal else block_attention(q, kb, vb)
        out, lse = part if out is None else merge(out, lse, *part)
    assert (out - F.scaled_dot_product_attention(q, k, v, is_causal=causal)).abs().max() <= TOL
    scores = q @ k.transpose(-2, -1) / 6**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(12, 12).triu(1).bool(), float("-inf"))
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1, keepdim=True), atol=1e-5)


def test_a_query_that_sees_no_key_weighs_nothing_and_keeps_gradients_finite():
    q, k, v = qkv(grad=True)
    pos = torch.arange(12)
    future = block_attention(q, k[:, :, 6:], v[:, :, 6:], pos, pos[6:])   # queries 0..5 see nothing
    assert torch.isinf(future[1][:, :, :6]).all() and (future[0][:, :, :6] == 0).all()
    out, _ = merge(*block_attention(q, k[:, :, :6], v[:, :, :6], pos, pos[:6]), *future)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert (out - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max() <= TOL


def test_layouts():
    assert [positions("contiguous", 8, 2, r).tolist() for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [positions("zigzag", 8, 2, r).tolist() for r in range(2)] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    every = torch.cat([positions("zigzag", 24, 3, r) for r in range(3)])
    assert sorted(every.tolist()) == list(range(24))
    with pytest.raises(ValueError, match="zigzag"):
        positions("zigzag", 6, 2, 0)
    with pytest.raises(ValueError, match="layout"):
        positions("striped", 8, 2, 0)


def test_causal_work():
    assert causal_pairs("contiguous", 8, 2) == [10, 26] and sum(causal_pairs("zigzag", 8, 2)) == 36
    assert len(set(causal_pairs("zigzag", 64, 4))) == 1
    owners = chunk_owners("zigzag", 2)
    assert owners.tolist() == [[0, -1, -1, -1], [1, 1, -1, -1], [1, 1, 1, -1], [0, 0, 0, 0]]
    assert ((chunk_owners("contiguous", 4) >= 0) == torch.ones(8, 8).tril().bool()).all()


def test_saved_score_bytes_grow_with_the_square_and_vanish_with_a_fused_kernel():
    small, large = qkv(8, grad=True), qkv(16, grad=True)
    plain = [saved_score_bytes(lambda t=t: block_attention(*t)[0], 6) for t in (small, large)]
    assert plain[1] == 4 * plain[0] > 0 and plain[0] % (2 * 8 * 8 * 4) == 0
    assert saved_score_bytes(lambda: F.scaled_dot_product_attention(*large), 6) == 0


WORKER = textwrap.dedent("""
    import json
    import torch
    import torch.nn.functional as F
    from ddp_helpers.context_parallel import Traffic, count_nodes, positions, ring_attention, ulysses_attention
    from ddp_helpers.runtime import distributed

    def errors(ctx, shards, causal, fn, **options):
        torch.manual_seed(0)
        q, k, v, grad = (torch.randn(1, 4, 16, 6) for _ in range(4))
        whole = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*whole, is_causal=causal)
        ref.backward(grad)
        mine = positions(shards, 16, ctx.world_size, ctx.rank)
        local = [t.index_select(2, mine).requires_grad_() for t in (q, k, v)]
        traffic = Traffic()
        out = fn(*local, causal=causal, traffic=traffic, **options)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(grad.index_select(2, mine))
        errs = [(out - ref.index_select(2, mine)).abs().max().item()]
        errs += [(t.grad - w.grad.index_select(2, mine)).abs().max().item() for t, w in zip(local, whole)]
        return {"errors": errs, "sent": [traffic.forward, traffic.backward]}

    with distributed() as ctx:
        res = {f"ring {lay} {c}": errors(ctx, lay, c, ring_attention, layout=lay)
               for lay, c in (("contiguous", False), ("contiguous", True), ("zigzag", True))}
        res["detached"] = errors(ctx, "zigzag", True, ring_attention, layout="zigzag", differentiable=False)
        res["ulysses"] = errors(ctx, "contiguous", True, ulysses_attention)
        local = [torch.randn(1, 4, 4, 6, requires_grad=True) for _ in range(3)]
        out, work = ring_attention(*local, causal=True, skip_hidden=True)
        res["hops"], res["work"] = count_nodes(out, "RingHopBackward"), work
        print(json.dumps(res))
""")


def test_ring_attention_and_ulysses_on_four_ranks(ranks_json):
    shard = 4 * 4 * 6 * 4                                  # heads x tokens per rank x head_dim x float32
    for rank, res in enumerate(ranks_json(WORKER, nproc=4)):
        for name in ("ring contiguous False", "ring contiguous True", "ring zigzag True", "ulysses"):
            assert res[name]["errors"][0] <= TOL and max(res[name]["errors"][1:]) <= 1e-5, (rank, name)
        for name in ("ring contiguous False", "ring contiguous True", "ring zigzag True"):
            assert res[name]["sent"] == [2 * 3 * shard] * 2            # k and v, N - 1 hops, both ways
        assert res["ulysses"]["sent"] == [4 * shard * 3 // 4] * 2     # 4 all-to-alls, (N-1)/N leaves
        detached = res["detached"]["errors"]
        assert detached[0] <= TOL and detached[1] <= 1e-5 and min(detached[2:]) > 0.05
        # rank r skips the blocks of ranks after it: r + 1 steps computed, and only those hops in backward
        assert [w > 0 for w in res["work"]] == [step <= rank for step in range(4)]
        assert res["hops"] == rank
