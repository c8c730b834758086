import textwrap

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from ddp_helpers.sharding import (
    CommCounter,
    local_tensor,
    make_stack,
    nbytes,
    ring_bytes_sent,
    state_bytes,
    zero_formula,
)


def test_zero_formula_per_stage():
    # 10 values over 4 ranks: a shard is ceil(10/4) = 3 values = 12 bytes
    assert zero_formula(10, 4, 0) == {"params": 40, "grads": 40, "optimizer": 80}
    assert zero_formula(10, 4, 1) == {"params": 40, "grads": 40, "optimizer": 24}
    assert zero_formula(10, 4, 2) == {"params": 40, "grads": 12, "optimizer": 24}
    assert zero_formula(10, 4, 3) == {"params": 12, "grads": 12, "optimizer": 24}
    assert zero_formula(10, 1, 3) == zero_formula(10, 1, 0)
    assert zero_formula(8, 2, 0, bytes_per_value=2, moments=6)["optimizer"] == 96
    with pytest.raises(ValueError, match="stage"):
        zero_formula(10, 2, 4)


def test_state_bytes_counts_params_grads_and_moments_once():
    model = nn.Linear(3, 2)                        # 8 values
    opt = torch.optim.Adam(model.parameters())
    assert state_bytes(model.parameters(), opt) == {"params": 32, "grads": 0, "optimizer": 0}
    model(torch.ones(1, 3)).sum().backward()
    assert state_bytes(model.parameters(), opt) == {"params": 32, "grads": 32, "optimizer": 0}
    opt.step()                                     # exp_avg and exp_avg_sq appear; step is left out
    assert state_bytes(model.parameters(), opt) == {"params": 32, "grads": 32, "optimizer": 64}
    assert state_bytes(model.parameters()) == {"params": 32, "grads": 32, "optimizer": 0}
    assert nbytes(None) == 0 and local_tensor(model.weight) is model.weight


def test_make_stack_is_seeded_and_sized():
    a, b = make_stack(), make_stack()
    assert sum(p.numel() for p in a.parameters()) == 6792
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(make_stack(seed=1)[0].weight, a[0].weight)
    assert [m.out_features for m in make_stack((4, 5, 6)) if isinstance(m, nn.Linear)] == [5, 6]


def test_ring_bytes_sent():
    assert ring_bytes_sent("all_reduce", 100, 4) == 150
    assert ring_bytes_sent("all_gather", 100, 4) == ring_bytes_sent("reduce_scatter", 100, 4) == 75
    with pytest.raises(ValueError, match="broadcast"):
        ring_bytes_sent("broadcast", 100, 4)


def test_comm_counter_sees_c10d_functional_and_autograd_collectives(single_rank_group):
    class AllReduceBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad

    t, leaf = torch.ones(10), torch.ones(3, requires_grad=True)
    with CommCounter() as comm:
        dist.all_reduce(t)                                  # 40 bytes
        dist.all_gather_single(torch.empty(10), t)          # the gathered tensor: 40 bytes
        dist.reduce_scatter_single(torch.empty(10), t)      # the input: 40 bytes
        funcol.all_gather_single(t, 0, dist.group.WORLD).wait()   # shard x group size: 40 bytes
        AllReduceBackward.apply(leaf).sum().backward()      # 12 bytes, during backward
        torch.ones(2) + 1                                   # not a collective
    assert comm.counts == {"all_reduce": 2, "all_gather": 2, "reduce_scatter": 1}
    assert comm.payload == {"all_reduce": 52, "all_gather": 80, "reduce_scatter": 40}
    assert comm.sent_per_rank(1) == 0.0


def test_comm_counter_names_dtensor_all_to_all():
    from ddp_helpers.sharding import _collective_name

    assert _collective_name(torch.ops._dtensor.shard_dim_alltoall) == "all_to_all"
    assert _collective_name(torch.ops.c10d.allreduce_) == "all_reduce"
    assert _collective_name(torch.ops.aten.add) is None


SHARDED_ADAM_WORKER = textwrap.dedent("""
    import json
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_helpers.compare import max_abs_diff
    from ddp_helpers.runtime import distributed
    from ddp_helpers.sharding import CommCounter, ShardedAdam, state_bytes

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))  # 19 values: padded to 20

    with distributed() as ctx:
        ddp = DDP(model())
        ref = torch.optim.Adam(ddp.parameters(), lr=0.1)
        hands = {stage: model() for stage in (1, 2)}
        opts = {stage: ShardedAdam(m.parameters(), stage=stage, lr=0.1) for stage, m in hands.items()}
        out, gen = {"diff": [], "bytes": {}}, torch.Generator().manual_seed(ctx.rank)
        for step in range(3):
            x, y = torch.randn(5, 4, generator=gen), torch.randn(5, 1, generator=gen)
            F.mse_loss(ddp(x), y).backward()
            ref.step(), ref.zero_grad()
            for stage, m in hands.items():
                F.mse_loss(m(x), y).backward()
                comm = CommCounter()
                with comm:
                    opts[stage].reduce_gradients()
                out["bytes"][stage] = state_bytes(m.parameters(), opts[stage].inner)
                with comm:
                    opts[stage].update()
                opts[stage].zero_grad()
                out["diff"].append(max_abs_diff(m, ddp.module))
        out["payload"] = dict(comm.payload)
        flat = opts[1].flat.untyped_storage().data_ptr()
        out["views"] = all(p.untyped_storage().data_ptr() == flat for p in hands[1].parameters())
        print(json.dumps(out))
""")


def test_sharded_adam_equals_ddp_adam_on_two_ranks(ranks_json):
    for out in ranks_json(SHARDED_ADAM_WORKER):
        assert max(out["diff"]) <= 1e-6
        # 19 values padded to 20: a slice of 10 values (40 bytes) per rank
        assert out["bytes"]["1"] == {"params": 76, "grads": 76 + 40, "optimizer": 80}
        assert out["bytes"]["2"] == {"params": 76, "grads": 40, "optimizer": 80}
        assert out["payload"] == {"reduce_scatter": 80, "all_gather": 80}
        assert out["views"]


def test_sharded_adam_rejects_other_stages(single_rank_group):
    with pytest.raises(ValueError, match="stage"):
        from ddp_helpers.sharding import ShardedAdam

        ShardedAdam(nn.Linear(2, 2).parameters(), stage=3)


# Every collective the notebooks run, under CommCounter and torch's own CommDebugMode at once.
AGAINST_TORCH_WORKER = textwrap.dedent('''
    import json
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_helpers.runtime import distributed
    from ddp_helpers.sharding import CommCounter

    with distributed() as ctx:
        n, root = ctx.world_size, ctx.rank == 0
        mesh, t, runs = init_device_mesh("cpu", (n,)), torch.ones(8), {}
        ddp = DDP(torch.nn.Linear(4, 4))
        cases = {
            "all_reduce": lambda: dist.all_reduce(t),
            "all_gather": lambda: dist.all_gather_into_tensor(torch.empty(8 * n), t),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(torch.empty(8 // n), t),
            "broadcast": lambda: dist.broadcast(t, 0),
            "all_to_all": lambda: dist.all_to_all_single(torch.empty(8), t),
            "scatter": lambda: dist.scatter(torch.empty(4), [torch.ones(4)] * n if root else None, src=0),
            "gather": lambda: dist.gather(torch.ones(4), [torch.empty(4) for _ in range(n)] if root else None),
            "reduce": lambda: dist.reduce(t, 0),
            "distribute_tensor Shard(0)": lambda: distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]),
            "distribute_tensor Replicate()": lambda: distribute_tensor(torch.ones(4, 4), mesh, [Replicate()]),
            "redistribute": lambda: distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)], src_data_rank=None)
                                    .redistribute(mesh, [Replicate()]),
            "DDP backward, no hook": lambda: ddp(torch.ones(2, 4)).sum().backward(),
        }
        for name, run in cases.items():
            with CommDebugMode() as theirs, CommCounter() as ours:
                run()
            runs[name] = {"torch": {str(op): k for op, k in theirs.get_comm_counts().items()},
                          "ours": dict(ours.counts), "payload": dict(ours.payload)}
        print(json.dumps(runs))
''')
# torch's operator names (c10d and functional collectives) -> the names CommCounter reports
TORCH_OP_KIND = {"allreduce_": "all_reduce", "_allgather_base_": "all_gather", "all_gather_into_tensor": "all_gather",
                 "_reduce_scatter_base_": "reduce_scatter", "broadcast_": "broadcast", "alltoall_base_": "all_to_all",
                 "scatter_": "scatter", "gather_": "gather", "reduce_": "reduce"}


def test_comm_counter_agrees_with_torchs_comm_debug_mode(ranks_json):
    per_rank = ranks_json(AGAINST_TORCH_WORKER)
    for runs in per_rank:
        for name, run in runs.items():
            theirs = {TORCH_OP_KIND[op.split(".")[-1]]: k for op, k in run["torch"].items()}
            assert theirs and run["ours"] == theirs, name
    # a scatter's payload is every shard together, 2 x 4 floats, on the root and elsewhere alike
    assert [runs["scatter"]["payload"] for runs in per_rank] == [{"scatter": 32}] * 2
    assert [runs["gather"]["payload"] for runs in per_rank] == [{"gather": 32}] * 2
