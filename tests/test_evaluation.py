import math
import textwrap
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from ddp_helpers.evaluation import EarlyStopping, EvalResult, any_rank, evaluate, reduce_sums


def _data(n=37, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 6, generator=gen), torch.randint(0, 3, (n,), generator=gen))


def _direct(model, x, y):
    """The reference: one forward over all samples, torch's mean cross-entropy, no ddp_helpers."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
    correct = int((logits.argmax(1) == y).sum())
    return SimpleNamespace(loss=F.cross_entropy(logits, y).item(), correct=correct, count=len(y))


def test_evaluate_single_process_matches_direct_computation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
    ds = _data()
    model.train()
    result = evaluate(model, DataLoader(ds, batch_size=5), "cpu")
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        logits = model(ds.tensors[0])
    assert result.count == 37
    assert result.correct == int((logits.argmax(1) == ds.tensors[1]).sum())
    assert math.isclose(result.accuracy, result.correct / 37)
    assert math.isclose(result.loss, F.cross_entropy(logits, ds.tensors[1]).item(), rel_tol=1e-6)
    assert set(result.as_dict()) == {"loss", "accuracy", "correct", "count"}


def test_evaluate_unwraps_module_attribute():
    class Wrapper(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, x):  # a wrapper whose forward must not be used
            raise AssertionError("evaluate must call the wrapped module")

    inner = nn.Linear(6, 3)
    wrapped = evaluate(Wrapper(inner), DataLoader(_data(), batch_size=8), "cpu")
    want = _direct(inner, *_data().tensors)  # the inner module on all 37 samples at once
    assert (wrapped.count, wrapped.correct) == (want.count, want.correct)
    assert math.isclose(wrapped.loss, want.loss, rel_tol=1e-6)


def test_reduce_sums_and_any_rank_outside_group():
    assert reduce_sums([1, 2.5], "cpu").tolist() == [1.0, 2.5]
    assert reduce_sums([1, 2.5], "cpu", dst=0).dtype == torch.float64
    assert any_rank(True, "cpu") and not any_rank(False, "cpu")


def test_early_stopping_max_and_min():
    stop = EarlyStopping(patience=2)
    decisions = [stop.step(m) for m in [0.5, 0.7, 0.7, 0.69, 0.9]]
    assert decisions == [False, False, False, True, False]
    assert stop.best == 0.9 and stop.best_epoch == 4 and stop.bad_epochs == 0

    stop = EarlyStopping(patience=1, mode="min", min_delta=0.1)
    assert [stop.step(m) for m in [1.0, 0.95]] == [False, True]  # 0.05 is not enough
    assert stop.best == 1.0 and not stop.improved


def test_early_stopping_state_round_trip():
    a = EarlyStopping(patience=3)
    for m in [0.1, 0.3, 0.2]:
        a.step(m)
    b = EarlyStopping(patience=3)
    b.load_state_dict(a.state_dict())
    assert [a.step(m) for m in [0.25, 0.2]] == [b.step(m) for m in [0.25, 0.2]] == [False, True]
    assert b.state_dict() == a.state_dict()
    # the state survives torch.save / torch.load(weights_only=True)
    path_state = EarlyStopping(patience=2).state_dict()
    assert path_state["best"] == -math.inf


def test_early_stopping_validation():
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(patience=0)
    with pytest.raises(ValueError, match="mode"):
        EarlyStopping(patience=1, mode="up")


def test_weights_only_load_of_state(tmp_path):
    s = EarlyStopping(patience=2)
    s.step(0.4)
    torch.save({"early": s.state_dict()}, tmp_path / "s.pt")
    loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    assert loaded["early"] == s.state_dict()


WORKER = textwrap.dedent('''
    """Uneven unpadded shards (19 and 18 samples of 37): totals equal one process."""
    import json
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Subset, TensorDataset
    from ddp_helpers.evaluation import any_rank, evaluate
    from ddp_helpers.runtime import distributed

    with distributed() as ctx:
        gen = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.randn(37, 6, generator=gen), torch.randint(0, 3, (37,), generator=gen))
        torch.manual_seed(0)
        model = nn.Linear(6, 3)
        shard = Subset(ds, range(ctx.rank, 37, ctx.world_size))
        everyone = evaluate(model, DataLoader(shard, batch_size=4), ctx.device)
        to_root = evaluate(model, DataLoader(shard, batch_size=4), ctx.device, dst=0)
        out = {"all": everyone.as_dict(), "root": to_root.as_dict() if to_root else None,
               "any": any_rank(ctx.rank == 1, ctx.device), "none": any_rank(False, ctx.device)}
        print(json.dumps(out))
''')


def test_two_ranks_exact_evaluation(ranks_json):
    outs = ranks_json(WORKER)
    torch.manual_seed(0)
    single = _direct(nn.Linear(6, 3), *_data().tensors)  # the same model on all 37 samples, by hand
    for rank, out in enumerate(outs):
        got = EvalResult(**out["all"])
        assert got.count == 37 and got.correct == single.correct
        assert math.isclose(got.loss, single.loss, rel_tol=1e-6)
        assert out["any"] is True and out["none"] is False
        assert (out["root"] is None) == (rank == 1)
    assert outs[0]["root"] == outs[0]["all"]


PLAIN_BN_WORKER = textwrap.dedent('''
    """Plain BatchNorm with different running statistics per rank: evaluate() uses each rank's own."""
    import json
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Subset, TensorDataset
    from ddp_helpers.evaluation import evaluate
    from ddp_helpers.runtime import distributed

    with distributed() as ctx:
        gen = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.randn(37, 6, generator=gen), torch.randint(0, 3, (37,), generator=gen))
        torch.manual_seed(0)
        model = nn.Sequential(nn.BatchNorm1d(6), nn.Linear(6, 3))
        model[0].running_mean.fill_(float(ctx.rank))  # as if each rank had trained on its own shard
        shard = Subset(ds, range(ctx.rank, 37, ctx.world_size))
        print(json.dumps(evaluate(model, DataLoader(shard, batch_size=4), ctx.device).as_dict()))
''')


def _plain_bn(running_mean: float) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(6), nn.Linear(6, 3))
    model[0].running_mean.fill_(running_mean)
    return model


def test_plain_batchnorm_shards_are_evaluated_with_their_own_running_stats(ranks_json):
    outs = ranks_json(PLAIN_BN_WORKER)
    x, y = _data().tensors
    own = [_direct(_plain_bn(float(r)), x[r::2], y[r::2]) for r in (0, 1)]  # each rank's model, its shard
    rank0_model = _direct(_plain_bn(0.0), x, y)
    got = EvalResult(**outs[0])
    assert outs[0] == outs[1] and got.count == 37
    assert got.correct == own[0].correct + own[1].correct
    assert math.isclose(got.loss * 37, own[0].loss * own[0].count + own[1].loss * own[1].count, rel_tol=1e-6)
    assert not math.isclose(got.loss, rank0_model.loss, rel_tol=1e-3)  # not what rank 0's model computes
