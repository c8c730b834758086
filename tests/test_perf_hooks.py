"""ddp_helpers.perf.hooks: payload counting, hook registration, the bf16 refusal, a tiny hooks run."""

import pytest
import torch
import torch.distributed as dist

from ddp_helpers.perf import hooks


def test_count_allreduces_sees_every_call_and_restores(single_rank_group):
    original = dist.all_reduce
    with hooks.count_allreduces() as sizes:
        dist.all_reduce(torch.ones(3))
        dist.all_reduce(torch.ones(2, dtype=torch.float16))
    assert sizes == [12, 4] and dist.all_reduce is original


def test_bf16_hook_is_refused_without_cuda_and_nccl(single_rank_group):
    error = hooks.bf16_registration_error()
    if torch.version.cuda is None and torch.version.hip is None:
        assert error == "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ or XPU and XCCL"


def test_unknown_hook_name_is_an_error(single_rank_group):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown hook"):
        hooks.register_hook(model, "int8")


def test_hooks_run_counts_payloads(single_rank_group):
    rng = torch.get_rng_state()
    r = hooks.hooks_run(width=32, depth=1, batch=8, steps=3)
    assert torch.equal(torch.get_rng_state(), rng)   # seeded models and teacher, the caller's generator untouched
    v = r["variants"]
    assert list(v) == list(hooks.HOOKS)
    params = r["parameters"]                          # 32*32+32 + 10*32+10 = 1386
    assert v["allreduce"]["payload_bytes"] == 4 * params and v["fp16"]["payload_bytes"] == 2 * params
    # PowerSGD rank 1: biases (42) uncompressed, 32x32 -> 32+32, 10x32 -> 10+32; rank 2 doubles the factors
    assert v["powerSGD rank 1"]["payload_bytes"] == 4 * (42 + 64 + 42)
    assert v["powerSGD rank 2"]["payload_bytes"] == 4 * (42 + 128 + 84)
    assert v["powerSGD rank 1"]["allreduces"] == 3 and v["allreduce"]["allreduces"] == 1
    for x in v.values():
        assert x["replicas_equal"] and len(x["seconds"]) == len(x["alone_seconds"]) == 3


def test_compression_pays_from_alpha_beta_and_the_measured_cost():
    ms = [0.010, 0.011, 0.012, 0.013]
    def v(nbytes, calls, alone):
        return {"payload_bytes": nbytes, "allreduces": calls, "seconds": ms, "alone_seconds": alone}
    run = {"variants": {"allreduce": v(2000, 1, ms), "cheap": v(1000, 1, [t + 0.001 for t in ms]),
                        "costly": v(1000, 3, [t + 0.010 for t in ms]), "free": v(1000, 1, ms)}}
    pays = hooks.compression_pays(run, alpha=0.001, beta=1e-6)
    assert pays["costly"]["threshold"] == "computed"
    assert pays["costly"]["saved_s"] == pytest.approx(-2 * 0.001 + 1000 * 1e-6)
    assert pays["costly"]["pays_below_bytes_per_s"] == pytest.approx(1000 / (0.010 + 2 * 0.001))
    assert pays["cheap"]["threshold"] == "cost within the spread" and pays["cheap"]["pays_below_bytes_per_s"] is None
    assert pays["free"]["verdict"] == "free vs allreduce: no measurable difference"
