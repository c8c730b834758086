"""ddp_helpers.experts: routing, capacity, the Switch loss and the loss-free bias in one process, against
hand-worked cases; expert parallelism on 4 ranks (every rank holds other experts) against one process,
uneven and padded, whole world and subgroups."""

from __future__ import annotations

import textwrap

import pytest
import torch

from ddp_helpers.experts import (
    MoE,
    capacity,
    expert_ffn,
    load_balancing_loss,
    route,
    token_flow,
    tokens,
    update_bias,
)


def test_capacity_rounds_up():
    assert capacity(32, 4, 1, 1.0) == 8 and capacity(32, 4, 2, 1.0) == 16
    assert capacity(30, 4, 1, 1.0) == 8 and capacity(32, 4, 1, 1.25) == 10 and capacity(8192, 64, 2, 1.25) == 320


def test_first_choices_are_served_before_second_choices_each_in_token_order():
    logits = torch.tensor([[3.0, 2.0, 0.0], [3.0, 0.0, 2.0], [0.0, 3.0, 2.0], [3.0, 2.0, 0.0]])
    r = route(logits, top_k=2, cap=2)
    assert r.experts.tolist() == [[0, 1], [0, 2], [1, 2], [0, 1]]
    # expert 0: first choices of tokens 0, 1, 3 -> token 3 dropped; expert 1: token 2 (first), then the
    # second choices of tokens 0 and 3 -> token 3's dropped; expert 2: second choices of 1 and 2
    assert r.keep.tolist() == [[True, True], [True, True], [True, True], [False, False]]
    assert r.dropped_tokens().tolist() == [3] and r.load().tolist() == [2, 2, 2]
    assert r.load(kept_only=False).tolist() == [3, 3, 2]
    assert torch.allclose(r.weights.sum(1), torch.ones(4))          # top-2 weights renormalised
    one = route(logits, top_k=1)
    assert torch.equal(one.weights[:, 0], torch.softmax(logits, -1).max(1).values)   # top-1: the probability


def test_moe_logits_are_exact_so_routing_is_the_same_on_every_machine():
    moe, x = MoE(8, 16, 4, seed=0), tokens(64, 8, seed=100)
    logits = x @ moe.router
    assert torch.equal(logits * 32, (logits * 32).round())           # multiples of 1/32: no rounding anywhere
    assert torch.equal(logits, (x.double() @ moe.router.double()).float())
    tied = (logits == logits.max(dim=1, keepdim=True).values).sum(1) > 1
    assert tied.any()                                                 # exact scores do tie...
    chosen = route(logits, 1).experts[:, 0]
    assert torch.equal(chosen, logits.argmax(dim=1))                  # ...and the lower expert wins (argmax's rule)


def test_the_layer_is_the_residual_plus_weighted_kept_experts():
    moe, x = MoE(8, 16, 4, top_k=2, seed=1), tokens(16, 8, seed=2)
    y, r = moe(x, cap=3)
    for t in range(16):
        want = x[t] + sum(r.weights[t, j] * expert_ffn(x[t], moe.w1[e], moe.w2[e])
                          for j, e in enumerate(r.experts[t].tolist()) if r.keep[t, j])
        assert torch.allclose(y[t], want, atol=1e-6)


def test_switch_loss_is_one_when_uniform_and_e_when_collapsed():
    sure = 30.0 * torch.eye(4)
    assert load_balancing_loss(route(sure[torch.arange(16) % 4], 1)).item() == pytest.approx(1.0, abs=1e-6)
    assert load_balancing_loss(route(sure[torch.zeros(16, dtype=torch.long)], 1)).item() == pytest.approx(4.0, abs=1e-6)
    logits = torch.zeros(8, 4, requires_grad=True)
    load_balancing_loss(route(logits, 1)).backward()
    assert logits.grad is not None                                    # through P_e only


def test_update_bias_moves_by_the_sign_of_the_deviation_centred():
    bias = update_bias(torch.zeros(4), torch.tensor([10, 2, 2, 2]), coeff=0.1)
    assert torch.allclose(bias, torch.tensor([-0.15, 0.05, 0.05, 0.05]))   # delta (-0.1, .1, .1, .1) minus its mean
    assert bias.sum().abs() < 1e-7
    assert torch.equal(update_bias(bias, torch.tensor([4, 4, 4, 4]), 0.1), bias)   # balanced: unchanged


def test_the_bias_changes_the_choice_not_the_weights():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    r = route(logits, 1, bias=torch.tensor([-1.0, 0.0, 0.0]))
    assert r.experts.tolist() == [[1]] and torch.equal(r.weights[0, 0], torch.softmax(logits, -1)[0, 1])


def test_token_flow_counts_kept_assignments_by_destination_rank():
    flow = token_flow([torch.tensor([[0], [3], [2]]), torch.tensor([[1], [1], [0]])],
                      [torch.tensor([[True], [True], [False]]), torch.tensor([[True], [False], [True]])], 2, 4)
    assert flow.tolist() == [[1, 1], [2, 0]]


WORKER = textwrap.dedent("""
    import json
    import torch
    import torch.distributed as dist
    from ddp_helpers.experts import A2ATraffic, MoE, capacity, expert_parallel, tokens
    from ddp_helpers.runtime import distributed

    def run(ctx, group, ep_rank, ep, padded, k, cap):
        whole = MoE(8, 16, 8, top_k=k)
        xs = [tokens(24, 8, seed=10 + r).requires_grad_() for r in range(ctx.world_size)]
        sum((whole(x, cap)[0] ** 2).sum() for x in xs).backward()
        moe = MoE(8, 16, 8, top_k=k).shard(ep_rank, ep)
        x = tokens(24, 8, seed=10 + ctx.rank).requires_grad_()
        traffic = A2ATraffic()
        y, routing = expert_parallel(moe, x, cap, group=group, padded=padded, traffic=traffic)
        (y ** 2).sum().backward()
        mine = slice(moe.first, moe.first + moe.w1.shape[0])
        errs = [(y - whole(xs[ctx.rank].detach(), cap)[0]).abs().max().item(),
                (x.grad - xs[ctx.rank].grad).abs().max().item()]
        return {"errors": errs, "sent": traffic.sent, "flow": traffic.flow, "kept": int(routing.keep.sum()),
                "local_w1": (moe.w1.grad - whole.w1.grad[mine]).abs().max().item() if group is None else None}

    with distributed() as ctx:
        halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        res = {}
        for padded in (False, True):
            for k in (1, 2):
                cap = capacity(24, 8, k, 1.0)
                res[f"world {padded} {k}"] = run(ctx, None, ctx.rank, ctx.world_size, padded, k, cap)
                res[f"pairs {padded} {k}"] = run(ctx, halves[ctx.rank // 2], ctx.rank % 2, 2, padded, k, cap)
        res["no cap"] = run(ctx, None, ctx.rank, ctx.world_size, False, 2, None)
        print(json.dumps(res))
""")


def test_expert_parallel_on_four_ranks_equals_one_process(ranks_json):
    ranks = ranks_json(WORKER, nproc=4)
    for rank, res in enumerate(ranks):
        for name, r in res.items():
            assert max(r["errors"]) <= 1e-5, (rank, name)
            if r["local_w1"] is not None:
                assert r["local_w1"] <= 1e-5, (rank, name)  # whole world: each expert on one rank, no reduction
        for k in (1, 2):
            cap, row = capacity(24, 8, k, 1.0), 8 * 4
            world = 3 * 2 * cap * row                       # padded: 2 experts x cap rows to each of 3 others
            assert res[f"world True {k}"]["sent"] == {"forward": 2 * world, "backward": 2 * world}
            assert res[f"pairs True {k}"]["sent"]["forward"] == 2 * 1 * 4 * cap * row   # 4 experts to 1 other
            uneven = res[f"world False {k}"]
            assert sum(uneven["flow"]) == uneven["kept"] and uneven["sent"]["forward"] <= 2 * world
    flows = [res["world False 1"]["flow"] for res in ranks]
    sent = [res["world False 1"]["sent"]["forward"] for res in ranks]
    for i in range(4):   # the dispatch sends row i off the diagonal, the combine column i
        off = sum(flows[i]) - flows[i][i] + sum(f[i] for f in flows) - flows[i][i]
        assert sent[i] == off * 8 * 4
