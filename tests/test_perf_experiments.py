"""ddp_helpers.perf.experiments at tiny sizes, on a one-rank gloo group: sums checked, calls counted.

No assertion is about speed: the machine may be loaded; only what the measurements compute.
"""

import json

import torch
import torch.nn.functional as F

from ddp_helpers.models import square_mlp
from ddp_helpers.perf import experiments as ex
from ddp_helpers.perf.timing import KiB


def test_sweep_and_ring_check_their_sums(single_rank_group):
    sweep = ex.allreduce_sweep([4 * KiB, 16 * KiB], repeats=2)
    assert sweep["correct"] and sweep["bytes"] == [4096, 16384] and len(sweep["seconds"]) == 2
    ring = ex.ring_vs_gloo(64 * KiB, repeats=2)
    assert ring["equal"] and ring["world_size"] == 1 and ring["ratio"] > 0
    json.dumps(ring)   # JSON-ready


def test_step_controls_agree_and_count_calls(single_rank_group):
    rng = torch.get_rng_state()
    r = ex.step_controls(width=32, depth=2, batch=4, steps=3, warmup=1, bucket_caps=(None, 0.001))
    assert torch.equal(torch.get_rng_state(), rng)   # seeded models, the caller's generator untouched
    v = r["variants"]
    assert list(v) == [ex.ALONE, ex.NO_COMM, ex.PER_TENSOR, ex.FLAT, "DDP cap default", "DDP cap 0.001"]
    assert [v[k]["allreduces"] for k in v] == [0, 0, 6, 1, 1, 3]
    for key in (ex.FLAT, "DDP cap default", "DDP cap 0.001"):
        assert v[key]["max_diff"] <= 1e-6          # the same average, however it is communicated
    for x in v.values():
        s = x["spread"]
        assert len(x["seconds"]) == s["n"] == 3 and s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
    assert set(r["efficiency"]) == set(v) - {ex.ALONE} and len(r["load"]) == 2
    verdicts = ex.control_verdicts(r)
    assert len(verdicts) == 3 + 2 and all(" vs " in line or "faster" in line for line in verdicts)


def test_flat_average_is_one_call_and_equals_per_tensor(single_rank_group):
    a, b = square_mlp(16, 2, seed=0), square_mlp(16, 2, seed=0)
    for m in (a, b):
        F.cross_entropy(m(torch.ones(3, 16)), torch.tensor([0, 1, 2])).backward()
    assert ex.flat_average_gradients(a) == 1 and ex.average_gradients(b) == 6
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_train_step_averages_between_backward_and_update():
    model = square_mlp(4, 1, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    seen = []
    x, y = torch.ones(2, 4), torch.tensor([0, 1])
    ex.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y,
                  average=lambda m: seen.append([p.detach().clone() for p in m.parameters()]))
    assert len(seen) == 1 and all(torch.equal(p, q) for p, q in zip(seen[0], before, strict=True))  # not yet updated
    assert not torch.equal(model[0].weight, before[0])


def test_overlap_timeline_interleaves_buckets_with_backward(single_rank_group):
    timeline, buckets = ex.overlap_timeline(width=32, depth=2, batch=4, bucket_cap_mb=0.001)
    assert buckets == 3 and timeline.count("all-reduce bucket 0") == 1
    last_grad = max(i for i, e in enumerate(timeline) if e.startswith("grad "))
    assert timeline.index("all-reduce bucket 0") < last_grad   # launched during backward
