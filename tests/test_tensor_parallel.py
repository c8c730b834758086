import textwrap

import pytest
import torch

from ddp_helpers.tensor_parallel import MLP, HandTensorParallelMLP, split_range


def test_split_range():
    assert [split_range(8, r, 4) for r in range(4)] == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    with pytest.raises(ValueError, match="evenly"):
        split_range(6, 0, 4)


def test_one_rank_split_is_the_dense_mlp(single_rank_group):
    torch.manual_seed(0)
    dense, x = MLP(4, 8), torch.randn(3, 4)
    tp = HandTensorParallelMLP(dense)
    assert torch.allclose(tp(x), dense(x), atol=1e-6)
    tp(x).sum().backward()
    dense(x).sum().backward()
    # one rank holds the whole model: its gradients are the dense ones, whole
    want = [dense.up.weight.grad, dense.up.bias.grad, dense.down.weight.grad, dense.down.bias.grad]
    for got, w in zip([p.grad for p in tp.parameters()], want, strict=True):
        assert got.shape == w.shape and torch.allclose(got, w, atol=1e-6)


TP_WORKER = textwrap.dedent("""
    import json
    import torch
    from ddp_helpers.compare import max_abs_diff
    from ddp_helpers.runtime import distributed
    from ddp_helpers.sharding import CommCounter
    from ddp_helpers.tensor_parallel import MLP, HandTensorParallelMLP

    with distributed() as ctx:
        torch.manual_seed(0)
        dense, x = MLP(8, 16), torch.randn(5, 8)
        tp = HandTensorParallelMLP(dense)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        ref = dense(xs[0])
        ref.pow(2).sum().backward()
        with CommCounter() as comm:
            out = tp(xs[1])
            out.pow(2).sum().backward()
        # the reference slices, written out: 16 hidden features over 2 ranks, rank r has rows 8r..8r+7
        # of up (weight rows and bias) and the matching columns of down.weight; down.bias is whole
        rows = slice(8 * ctx.rank, 8 * ctx.rank + 8)
        want = [dense.up.weight.grad[rows], dense.up.bias.grad[rows], dense.down.weight.grad[:, rows],
                dense.down.bias.grad]
        print(json.dumps({"out": max_abs_diff([out], [ref]), "dx": max_abs_diff([xs[1].grad], [xs[0].grad]),
                          "grads": max_abs_diff([p.grad for p in tp.parameters()], want),
                          "shape": list(tp.up_weight.shape), "comm": dict(comm.counts)}))
""")


def test_hand_tensor_parallel_mlp_equals_dense_on_two_ranks(ranks_json):
    for out in ranks_json(TP_WORKER):
        assert out["out"] <= 1e-5 and out["dx"] <= 1e-5 and out["grads"] <= 1e-5
        assert out["shape"] == [8, 8]                      # half of up's 16 output features
        assert out["comm"] == {"all_reduce": 2}            # one in forward, one in backward
