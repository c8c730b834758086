import textwrap

import pytest
import torch
from torch import nn

from ddp_helpers.models import ConvNet
from ddp_helpers.syncbn import SyncBatchNorm, SyncBatchNormFunction, batch_stats, convert_sync_batchnorm


def _pair(bn_cls, channels, momentum=0.1, affine=True):
    torch.manual_seed(0)
    ref = bn_cls(channels, momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
    ours = SyncBatchNorm(channels, momentum=momentum, affine=affine)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("bn_cls,shape", [(nn.BatchNorm1d, (6, 4)), (nn.BatchNorm1d, (6, 4, 5)),
                                          (nn.BatchNorm2d, (5, 3, 4, 4)), (nn.BatchNorm3d, (3, 2, 2, 3, 3))])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_single_process_equals_batchnorm(bn_cls, shape, momentum):
    ref, ours = _pair(bn_cls, shape[1], momentum)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = (torch.randn(shape, generator=gen) * 2 + 1).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        target = torch.randn(shape, generator=gen)
        ref.zero_grad()
        ours.zero_grad()
        y_ref, y_ours = ref(x), ours(x2)
        torch.testing.assert_close(y_ours, y_ref, atol=1e-5, rtol=1e-5)
        (y_ref * target).sum().backward()
        (y_ours * target).sum().backward()
        torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(ref, name), atol=1e-6, rtol=1e-6, msg=name)
    ref.eval()
    ours.eval()
    x = torch.randn(shape, generator=gen)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)


def test_no_affine_and_no_running_stats():
    torch.manual_seed(0)
    ref = nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    ours = SyncBatchNorm(3, affine=False, track_running_stats=False)
    x = torch.randn(4, 3, 2, 2, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    ref(x).pow(2).sum().backward()
    ours(x2).pow(2).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)
    ours.eval()  # no running stats: eval still uses the batch statistics
    torch.testing.assert_close(ours(x), ref.eval()(x), atol=1e-6, rtol=1e-6)


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.rand(3, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.rand(3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: SyncBatchNormFunction.apply(x, w, b, None, None, 1e-5, 0.1, None), (x, w, b))


def test_batch_stats_and_errors():
    x = torch.arange(12.0).view(6, 2)
    mean, var, count = batch_stats(x)
    torch.testing.assert_close(mean.float(), x.mean(0))
    torch.testing.assert_close(var.float(), x.var(0, unbiased=False))
    assert count.item() == 6
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        SyncBatchNorm(2)(torch.randn(1, 2))
    with pytest.raises(ValueError, match="at least 2D"):
        SyncBatchNorm(2)(torch.randn(2))


def test_bfloat16_autocast_keeps_dtype_and_is_close():
    ref, ours = _pair(nn.BatchNorm2d, 3)
    x = torch.randn(8, 3, 4, 4)
    y = ours(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref(x), atol=0.05, rtol=0.02)


def test_convert_on_cpu_and_for_cuda():
    torch.manual_seed(0)
    model = ConvNet()
    x = torch.randn(4, 1, 28, 28)
    model.eval()
    before = model(x)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    converted = convert_sync_batchnorm(model)
    syncs = [m for m in converted.modules() if isinstance(m, SyncBatchNorm)]
    assert len(syncs) == len(bns) == 2
    assert not any(type(m) is nn.BatchNorm2d for m in converted.modules())
    assert syncs[0].weight is bns[0].weight and syncs[1].running_var is bns[1].running_var
    assert not syncs[0].training  # mode carried over
    torch.testing.assert_close(converted(x), before)
    # Converting for CUDA only swaps module classes, so it can be checked without a GPU.
    gpu_version = convert_sync_batchnorm(ConvNet(), device="cuda")
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in gpu_version.modules()) == 2


WORKER = textwrap.dedent('''
    """2 ranks with uneven batches (3 and 5) against one BatchNorm2d on all 8 samples."""
    import json
    import torch
    import torch.distributed as dist
    from torch import nn
    from ddp_helpers.runtime import distributed
    from ddp_helpers.syncbn import SyncBatchNorm

    with distributed() as ctx:
        torch.manual_seed(0)
        x = torch.randn(8, 3, 4, 4) * 2 + 1
        target = torch.randn(8, 3, 4, 4)
        ref = nn.BatchNorm2d(3)
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
        ours = SyncBatchNorm(3)
        ours.load_state_dict(ref.state_dict())
        lo, hi = (0, 3) if ctx.rank == 0 else (3, 8)
        xr = x.clone().requires_grad_()
        (ref(xr) * target).sum().backward()
        mine = x[lo:hi].clone().requires_grad_()
        (ours(mine) * target[lo:hi]).sum().backward()   # sum over samples: ranks add up
        grads = torch.cat([ours.weight.grad, ours.bias.grad])
        dist.all_reduce(grads)                          # parameter grads are local sums
        out = {
            "x_grad": (mine.grad - xr.grad[lo:hi]).abs().max().item(),
            "wb_grad": (grads - torch.cat([ref.weight.grad, ref.bias.grad])).abs().max().item(),
            "running_mean": (ours.running_mean - ref.running_mean).abs().max().item(),
            "running_var": (ours.running_var - ref.running_var).abs().max().item(),
        }
        # A second training step: the outputs of step 2 must match too.
        out["y"] = (ours(x[lo:hi]) - ref(x)[lo:hi]).abs().max().item()
        print(json.dumps(out))
''')


def test_two_ranks_uneven_batches_equal_full_batch(ranks_json):
    for rank, diffs in enumerate(ranks_json(WORKER)):
        assert set(diffs) == {"y", "x_grad", "wb_grad", "running_mean", "running_var"}
        assert max(diffs.values()) < 1e-5, (rank, diffs)


@pytest.mark.parametrize("track", [True, False])
def test_eval_mode_never_communicates(monkeypatch, track):
    """As torch's nn.SyncBatchNorm: eval mode is local, with or without running statistics.

    A rank of a 2-rank group would hang here if it all-reduced (evaluate() on uneven shards)."""
    from ddp_helpers import syncbn

    def no_collectives(*args, **kwargs):
        raise AssertionError("SyncBatchNorm communicated in eval mode")

    monkeypatch.setattr(syncbn, "_world", lambda group: 2)  # as if in a 2-rank group
    monkeypatch.setattr(syncbn.dist, "all_reduce", no_collectives)
    torch.manual_seed(0)
    ref = nn.BatchNorm2d(3, track_running_stats=track).eval()
    ours = SyncBatchNorm(3, track_running_stats=track)
    ours.load_state_dict(ref.state_dict())
    ours.eval()
    x = torch.randn(5, 3, 2, 2, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y_ref, y_ours = ref(x), ours(x2)
    torch.testing.assert_close(y_ours, y_ref, atol=1e-6, rtol=1e-6)
    y_ref.pow(2).sum().backward()
    y_ours.pow(2).sum().backward()  # the backward of eval mode is local too
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)
    with pytest.raises(AssertionError, match="communicated"):
        ours.train()(x2)  # training mode does synchronise: the patch is live
