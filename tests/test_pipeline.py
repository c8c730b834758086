"""ddp_helpers.pipeline: the stage split, the Spin layer, the stage-call timer, the bubble arithmetic
and the live-microbatch and saved-bytes counts that notebook 13 asserts on."""

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from ddp_helpers import pipeline
from ddp_helpers.pipeline import (
    SavedBytes,
    Spin,
    StageTimer,
    bubble_fraction,
    make_costed_mlp,
    make_mlp,
    measured_bubble,
    order,
    peak_live,
)

matplotlib.use("Agg")


def test_stage_range_and_module():
    assert [pipeline.stage_range(8, s, 4) for s in range(4)] == [range(0, 2), range(2, 4), range(4, 6), range(6, 8)]
    with pytest.raises(ValueError, match="evenly"):
        pipeline.stage_range(6, 0, 4)
    with pytest.raises(ValueError, match="stage 4"):
        pipeline.stage_range(8, 4, 4)
    model = make_mlp(4, blocks=4)
    stage = pipeline.stage_module(model, 1, 2)
    assert len(stage) == 2 and torch.equal(stage[0][0].weight, model[2][0].weight)
    assert stage[0][0].weight is not model[2][0].weight   # a copy: the stage's gradients are its own


def test_make_mlp_is_seeded():
    a, b = make_mlp(4, 2, seed=3), make_mlp(4, 2, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(make_mlp(4, 2, seed=4)[0][0].weight, a[0][0].weight)


def test_the_mlp_builders_leave_the_callers_random_state_alone():
    # worked out by hand: the draw after the builders is the draw without them
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    make_mlp(4, 2, seed=3)
    make_costed_mlp(4, 2, 0.0, 0.0, 0.0, seed=3)
    assert torch.equal(torch.rand(3), expected)
    with torch.random.fork_rng(devices=[]):  # and the weights are those of manual_seed, then building
        torch.manual_seed(3)
        first = torch.nn.Linear(4, 4)
    assert torch.equal(make_mlp(4, 2, seed=3)[0][0].weight, first.weight)


def test_spin_is_an_identity_for_values_and_gradients():
    x = torch.randn(3, 4, requires_grad=True)
    y = Spin(rounds=3, size=8)(x)
    assert torch.equal(y, x) and y is not x
    (y * 2).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))
    free = torch.randn(2)
    assert Spin(0)(free) is free
    plain, spun = make_mlp(4, 2), make_mlp(4, 2, spin_rounds=2)
    inp = torch.randn(5, 4)
    assert torch.equal(plain(inp), spun(inp))


def test_bubble_fraction():
    assert bubble_fraction(2, 4) == 1 / 5 and bubble_fraction(4, 8) == 3 / 11 and bubble_fraction(1, 3) == 0
    with pytest.raises(ValueError):
        bubble_fraction(0, 4)


def gpipe_events(p, m, f=1.0, b=2.0):
    """An ideal GPipe timeline: stage s runs forward i in slot s + i, backward i after the last forward."""
    ranks = []
    for s in range(p):
        evs = [dict(kind="F", stage=s, chunk=i, start=(s + i) * f, end=(s + i + 1) * f) for i in range(m)]
        t0 = (m + p - 1) * f + (p - 1 - s) * b
        evs += [dict(kind="B", stage=s, chunk=i, start=t0 + i * b, end=t0 + (i + 1) * b) for i in range(m)]
        ranks.append(evs)
    return ranks


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (3, 1)])
def test_measured_bubble_of_an_ideal_gpipe_is_the_formula(p, m):
    assert measured_bubble(gpipe_events(p, m)) == pytest.approx(bubble_fraction(p, m), rel=1e-12)


def test_measured_bubble_needs_events():
    with pytest.raises(ValueError):
        measured_bubble([[], []])


def test_order_and_peak_live():
    evs = gpipe_events(2, 3)[0]
    assert order(reversed(evs)) == ["F0", "F1", "F2", "B0", "B1", "B2"]
    assert peak_live(order(evs)) == 3
    assert peak_live(["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]) == 2      # 1F1B, stage 0 of 2
    assert peak_live(["F0", "I0", "F1", "W0", "I1", "W1"]) == 2                 # alive until its W


class FakeStage:
    stage_index = 3

    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None, save_forward_output=True):
        return fwd_chunk_id

    def backward_one_chunk(self, bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
        return bwd_chunk_id

    def backward_weight_one_chunk(self, bwd_chunk_id, last_backward=False):
        if bwd_chunk_id < 0:
            raise RuntimeError("boom")


def test_stage_timer_records_every_kind_in_call_order():
    ticks = iter(range(100))
    timer = StageTimer(clock=lambda: float(next(ticks)))
    stage = FakeStage()
    timer.wrap(stage)
    assert stage.forward_one_chunk(0, ()) == 0
    stage.backward_one_chunk(0, full_backward=False)
    stage.backward_one_chunk(1, None, True)
    stage.backward_weight_one_chunk(bwd_chunk_id=0)
    with pytest.raises(RuntimeError):
        stage.backward_weight_one_chunk(-1)   # recorded even when the call fails
    assert [(e.kind, e.stage, e.chunk) for e in timer.events] == [
        ("F", 3, 0), ("I", 3, 0), ("B", 3, 1), ("W", 3, 0), ("W", 3, -1)]
    assert all(e.end > e.start for e in timer.events)
    assert timer.as_dicts()[0] == {"kind": "F", "stage": 3, "chunk": 0, "start": 0.0, "end": 1.0}


def test_saved_bytes_counts_activations_once_and_frees_them():
    torch.manual_seed(0)
    model = make_mlp(8, blocks=2)
    x = torch.randn(5, 8)
    with SavedBytes(exclude=model.parameters()) as saved:
        out = model(x)
    one = 5 * 8 * 4
    assert saved.now == saved.peak == 3 * one   # x, the first tanh output (saved twice), the last tanh output
    out.sum().backward()
    del out
    assert saved.now == 0 and saved.peak == 3 * one
    with SavedBytes() as with_params:          # parameters counted when not excluded
        model(x)
    assert with_params.peak > 3 * one


def test_saved_bytes_gradients_unchanged():
    model = make_mlp(4, blocks=2)
    x = torch.randn(3, 4)
    model(x).pow(2).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with SavedBytes(exclude=model.parameters()):
        out = model(x)
    out.pow(2).sum().backward()
    assert all(torch.equal(p.grad, w) for p, w in zip(model.parameters(), want, strict=True))


def test_stage_ids():
    assert pipeline.stage_ids("GPipe", 1, 2) == ([1], 2)
    assert pipeline.stage_ids("Interleaved1F1B", 1, 4) == ([1, 5], 8)
    assert pipeline.stage_ids("DualPipeV", 0, 2) == ([0, 3], 4)
    with pytest.raises(ValueError, match="unknown schedule"):
        pipeline.stage_ids("Pipedream", 0, 2)


def test_one_rank_schedule_equals_one_process(single_rank_group):
    model = make_mlp(4, blocks=2)
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    F.mse_loss(model(x), y).backward()
    run = pipeline.build_schedule("GPipe", model, 0, 1, torch.device("cpu"), 4, F.mse_loss)
    run.step(x, y)
    got = [p.grad for p in run.modules[0].parameters()]
    assert all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(got, model.parameters(), strict=True))
    assert order(run.timer.events) == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]


@pytest.mark.parametrize(("name", "mapping"), [("GPipe", {0: 0}), ("Interleaved1F1B", {0: 0, 1: 0}),
                                              ("ZBVZeroBubble", {0: 0, 1: 0})])
def test_stage_to_rank_is_torchs_map(single_rank_group, name, mapping):
    run = pipeline.build_schedule(name, make_mlp(4, blocks=2), 0, 1, torch.device("cpu"), 2, F.mse_loss)
    assert run.stage_to_rank() == mapping
    torch_map = getattr(run.schedule, "stage_index_to_group_rank", None) or run.pipeline_stages[0].stage_index_to_group_rank
    torch_map[0] = 7                      # what torch holds is what it reports, not the helper's stage_ids
    assert run.stage_to_rank()[0] == 7


def test_stage_to_rank_needs_a_torch_stage(single_rank_group):
    run = pipeline.build_schedule("GPipe", make_mlp(4, blocks=2), 0, 1, torch.device("cpu"), 2, F.mse_loss)
    run.pipeline_stages = []
    with pytest.raises(ValueError, match="no torch stage"):
        run.stage_to_rank()


def test_draw_timeline():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    pipeline.draw_timeline(ax, gpipe_events(2, 2), "GPipe")
    assert len(ax.collections) == 8 and [t.get_text() for t in ax.texts][:2] == ["F0", "F1"]
    assert ax.get_title() == "GPipe"
    plt.close(fig)


FORWARD, INPUT, WEIGHT = 1.0, 2.0, 3.0   # costs told apart by value; the recorder does not wait


def _paid(block_cls, step):
    """The costs a 2-block stage pays in its forward and in ``step`` ('B', 'I' or 'W'), in call order."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    paid = []
    torch.manual_seed(0)
    stage = torch.nn.Sequential(*(block_cls(4, FORWARD, INPUT, WEIGHT, sleep=paid.append) for _ in range(2)))
    x = torch.randn(3, 4, requires_grad=True)   # a middle stage: its input needs a gradient
    out = stage(x)
    assert paid == [FORWARD, FORWARD]
    paid.clear()
    if step == "B":
        out.sum().backward()
    else:
        _, groups = stage_backward_input([out], [torch.ones_like(out)], [x], stage.parameters())
        if step == "W":
            paid.clear()
            stage_backward_weight(stage.parameters(), groups)
    return sorted(paid)


def test_costed_block_pays_each_cost_in_its_own_step():
    assert _paid(pipeline.CostedBlock, "B") == [INPUT, INPUT, WEIGHT, WEIGHT]   # a full backward pays both
    assert _paid(pipeline.CostedBlock, "I") == [INPUT, INPUT]
    assert _paid(pipeline.CostedBlock, "W") == [WEIGHT, WEIGHT]


class _CostOnOutput(pipeline.CostedBlock):
    """Wrong: the weight cost put on the block's output, the path every gradient takes."""

    def forward(self, x):
        self.sleep(self.forward_s)
        out = torch.tanh(torch.nn.functional.linear(pipeline._Wait.apply(x, self.input_grad_s, self.sleep),
                                                    self.linear.weight, self.linear.bias))
        return pipeline._Wait.apply(out, self.weight_grad_s, self.sleep)


def test_cost_on_the_wrong_path_is_paid_in_the_wrong_step():
    assert WEIGHT in _paid(_CostOnOutput, "I") and _paid(_CostOnOutput, "W") == []


def test_costed_gradients_equal_the_plain_layers():
    model = pipeline.make_costed_mlp(4, 2, 0.0, 0.0, 0.0, seed=1)
    plain = torch.nn.Sequential(*(torch.nn.Sequential(b.linear, torch.nn.Tanh()) for b in model))
    x = torch.randn(3, 4)
    assert torch.equal(model(x), plain(x))
    model(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    plain(x).sum().backward()
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))


def test_make_costed_mlp_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a, b = pipeline.make_costed_mlp(4, 2, 0, 0, 0, seed=3), pipeline.make_costed_mlp(4, 2, 0, 0, 0, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(pipeline.make_costed_mlp(4, 2, 0, 0, 0, seed=4)[0].linear.weight, a[0].linear.weight)
    with pytest.raises(ValueError, match="at least 0"):
        pipeline.CostedBlock(4, -1.0, 0.0, 0.0)
