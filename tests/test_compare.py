import textwrap

import pytest
import torch
from torch import nn

from ddp_helpers import torchrun
from ddp_helpers.buckets import (
    BucketRecorder,
    record_grad_ready,
)
from ddp_helpers.compare import (
    all_equal_across_ranks,
    assert_replicas_equal,
    backward_on_own_batch,
    checksum,
    digest,
    gather_digests,
    gather_per_rank,
    grads,
    max_abs_diff,
    named_tensors,
    shard,
)
from ddp_helpers.models import ToyModel


def test_digest_is_bitwise_identity():
    torch.manual_seed(0)
    a = ToyModel()
    b = ToyModel()
    b.load_state_dict(a.state_dict())
    assert digest(a) == digest(b) == digest(a.state_dict()) != digest(ToyModel())
    assert len(digest(a)) == 16
    with torch.no_grad():
        b.net2.bias[0] = torch.nextafter(b.net2.bias[0], torch.tensor(1.0))  # one ulp
    assert digest(a) != digest(b)
    # names, shapes and dtypes count, not only bytes
    t = torch.arange(6.0)
    assert digest([t]) != digest([t.reshape(2, 3)]) != digest([t.double()])
    assert digest({"x": t}) != digest({"y": t})


def test_checksum_is_position_weighted():
    x = torch.tensor([1.0, 2.0, 3.0])
    assert checksum([x]) == 1 * 1 + 2 * 2 + 3 * 3
    assert checksum([x.flip(0)]) != checksum([x])
    assert checksum([None, x]) == checksum([x])
    assert checksum([torch.ones(8)]) == 29  # weights 1, 2, ..., 7 (sum 28), then 1 again: 28 + 1


def test_max_abs_diff_on_state_dicts_and_grad_lists():
    torch.manual_seed(0)
    a, b = ToyModel(), ToyModel()
    # another path: all parameters as one vector, the infinity norm of the difference
    flat = nn.utils.parameters_to_vector(a.parameters()) - nn.utils.parameters_to_vector(b.parameters())
    assert max_abs_diff(a, b) == pytest.approx(torch.linalg.vector_norm(flat, ord=float("inf")).item())
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.net2.bias[1] += 0.25  # one value moved: that is the largest difference
    assert max_abs_diff(a, b) == pytest.approx(0.25)
    assert max_abs_diff(a.state_dict(), a.state_dict()) == 0.0
    assert max_abs_diff([torch.zeros(2), None], [torch.tensor([0.0, -0.5]), None]) == 0.5
    assert max_abs_diff([], []) == 0.0


def test_max_abs_diff_rejects_mismatches():
    with pytest.raises(ValueError, match="different tensors"):
        max_abs_diff({"a": torch.zeros(1)}, {"b": torch.zeros(1)})
    with pytest.raises(ValueError, match="shapes differ"):
        max_abs_diff([torch.zeros(2)], [torch.zeros(3)])
    with pytest.raises(ValueError, match="None"):
        max_abs_diff([None], [torch.zeros(1)])
    with pytest.raises(TypeError):
        named_tensors(torch.zeros(2))


def test_grads_copies_and_keeps_none():
    model = ToyModel()
    assert grads(model) == [None] * 4
    model(torch.randn(3, 10)).sum().backward()
    g = grads(model)
    g[0].zero_()
    assert model.net1.weight.grad.abs().sum() > 0  # a copy, not the live gradient


def test_shard_concatenates_back():
    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    parts = [shard((x, y), r, 3) for r in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)
    assert torch.equal(torch.cat([p[1] for p in parts]), y)
    assert torch.equal(shard(x, 1, 2), x[3:])
    with pytest.raises(ValueError, match="evenly"):
        shard(x, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        shard(x, 2, 2)


def test_collectives_with_one_rank(single_rank_group):
    model = ToyModel()
    assert gather_digests(model) == [digest(model)]
    assert assert_replicas_equal(model) == digest(model)
    assert all_equal_across_ranks((1, "a"))
    assert gather_per_rank({"rank": 0}) == [{"rank": 0}]


def test_backward_on_own_batch_depends_on_rank_and_seed():
    def grad_after(rank, seed):
        torch.manual_seed(0)
        model = nn.Linear(6, 3)
        loss = backward_on_own_batch(model, rank, "cpu", seed=seed, batch=4)
        assert loss.ndim == 0 and model.weight.grad is not None
        return model.weight.grad.clone()

    assert torch.equal(grad_after(1, 0), grad_after(1, 0))      # the same batch again
    assert not torch.equal(grad_after(0, 0), grad_after(1, 0))  # another rank, other data
    assert not torch.equal(grad_after(0, 0), grad_after(0, 1))  # another step, other data


def test_bucket_recorder_counts_allreduces(single_rank_group):
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(ToyModel())
    recorder = BucketRecorder.attach(ddp)
    ddp(torch.randn(4, 10)).sum().backward()
    calls = recorder.take()
    assert len(calls) == 1 and calls[0][0] == 0
    assert sorted(calls[0][1]) == ["net1.bias", "net1.weight", "net2.bias", "net2.weight"]
    assert calls[0][2] == 165 and recorder.take() == []  # 10*10 + 10 + 10*5 + 5 values, one bucket
    with ddp.no_sync():
        ddp(torch.randn(4, 10)).sum().backward()
    assert recorder.take() == []  # no_sync: no collective at all


def test_timeline_interleaves_grads_and_buckets(single_rank_group):
    torch.manual_seed(0)
    model = ToyModel()
    timeline = []
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-4)  # ~100 bytes: a bucket per layer
    recorder = BucketRecorder.attach(ddp, timeline)
    handles = record_grad_ready(model, timeline)
    for _ in range(2):  # the second backward uses the buckets rebuilt after the first
        timeline.clear()
        ddp(torch.randn(4, 10)).sum().backward()
    assert timeline == ["grad net2.bias", "grad net2.weight", "all-reduce bucket 0",
                        "grad net1.bias", "grad net1.weight", "all-reduce bucket 1"]
    assert [names for _, names, _ in recorder.take()][-2:] == [["net2.bias", "net2.weight"],
                                                              ["net1.bias", "net1.weight"]]
    for h in handles:
        h.remove()
    timeline.clear()
    model.zero_grad()
    model(torch.randn(4, 10)).sum().backward()  # the plain module: no DDP hooks, no grad hooks
    assert timeline == []


WORKER = textwrap.dedent('''
    import torch
    from ddp_helpers.compare import all_equal_across_ranks, assert_replicas_equal, gather_digests
    from ddp_helpers.models import ToyModel
    from ddp_helpers.runtime import distributed

    with distributed() as ctx:
        torch.manual_seed(ctx.rank)          # different weights per rank
        model = ToyModel()
        digests = gather_digests(model)
        print("distinct", len(set(digests)), "equal_flag", all_equal_across_ranks(ctx.rank))
        try:
            assert_replicas_equal(model)
        except AssertionError as exc:
            print("raised", "rank 0:" in str(exc) and "rank 1:" in str(exc))
        torch.manual_seed(0)
        same = ToyModel()
        print("same", assert_replicas_equal(same) == gather_digests(same)[1])
''')


def test_two_ranks_detect_different_replicas(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    res = torchrun(script, nproc=2, live="quiet", summary=False, timeout=60)
    for rank in (0, 1):
        assert res.stdout[rank] == ["distinct 2 equal_flag False", "raised True", "same True"]
