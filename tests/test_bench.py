"""Sanity tests of ddp_helpers.bench at tiny sizes: arithmetic, correctness checks, result shapes.

No assertion is about speed: the machine may be loaded; only what the measurements compute.
"""

import json

import pytest

from ddp_helpers import bench


def test_message_sizes_cover_4kib_to_64mib():
    sizes = bench.message_sizes()
    assert sizes[0] == 4 * bench.KiB and sizes[-1] == 64 * bench.MiB
    assert all(b == 4 * a for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    assert bench.message_sizes(10, 100, 3) == [10, 30, 90]
    with pytest.raises(ValueError):
        bench.message_sizes(0, 10)


def test_fit_recovers_alpha_and_beta_exactly():
    sizes = bench.message_sizes()
    alpha, beta = 50e-6, 1 / 2e9
    seconds = [alpha + beta * n for n in sizes]
    a, b = bench.fit_latency_bandwidth(sizes, seconds)
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)


def test_fit_weights_small_messages():
    # 10% noise on the largest point must not wreck the latency estimate
    sizes = bench.message_sizes()
    seconds = [50e-6 + n / 2e9 for n in sizes]
    seconds[-1] *= 1.1
    a, _ = bench.fit_latency_bandwidth(sizes, seconds)
    assert a == pytest.approx(50e-6, rel=0.2)
    with pytest.raises(ValueError):
        bench.fit_latency_bandwidth([1], [1.0])


def test_bus_bandwidth_and_efficiency():
    assert bench.bus_bandwidth(100, 1.0, 2) == 100          # 2(N-1)/N = 1 for N = 2
    assert bench.bus_bandwidth(100, 1.0, 4) == 150
    assert bench.scaling_efficiency(100, 180, 2) == 0.9


def test_mlp_has_several_million_parameters():
    params = sum(p.numel() for p in bench.make_mlp().parameters())
    assert params == 4 * (1024 * 1024 + 1024) + 1024 * 10 + 10


def test_time_collective_and_compare(single_rank_group):
    calls = []
    times = bench.time_collective(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(times) == 3 and all(t >= 0 for t in times) and len(calls) == 5
    order = []
    both = bench.compare_collectives({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                     repeats=2, warmup=0)
    assert order == ["a", "b", "b", "a"]       # the order rotates each round
    assert sorted(both) == ["a", "b"] and all(len(v) == 2 for v in both.values())


def test_sweep_and_ring_check_their_sums(single_rank_group):
    sweep = bench.allreduce_sweep([4 * bench.KiB, 16 * bench.KiB], repeats=2)
    assert sweep["correct"] and sweep["bytes"] == [4096, 16384] and len(sweep["seconds"]) == 2
    ring = bench.ring_vs_gloo(64 * bench.KiB, repeats=2)
    assert ring["equal"] and ring["world_size"] == 1 and ring["ratio"] > 0
    json.dumps(ring)   # JSON-ready


def test_ddp_vs_hand_agree_and_count_buckets(single_rank_group):
    result = bench.ddp_vs_hand(width=32, depth=2, batch=4, steps=2, warmup=1, bucket_caps=(None, 0.001))
    assert result["hand_allreduces"] == 6 and len(result["hand_s"]) == 2
    for key in ("default", "0.001"):
        assert result["ddp"][key]["max_diff"] <= 1e-6
    assert result["ddp"]["default"]["buckets"] == 1 and result["ddp"]["0.001"]["buckets"] == 3


def test_overlap_timeline_interleaves_buckets_with_backward(single_rank_group):
    timeline, buckets = bench.overlap_timeline(width=32, depth=2, batch=4, bucket_cap_mb=0.001)
    assert buckets == 3 and timeline.count("all-reduce bucket 0") == 1
    last_grad = max(i for i, e in enumerate(timeline) if e.startswith("grad "))
    assert timeline.index("all-reduce bucket 0") < last_grad   # launched during backward


def test_scaling_run_counts_samples(single_rank_group):
    result = bench.scaling_run(width=32, depth=1, batch=4, steps=2, warmup=1)
    assert result["samples_counted"] == 8 and result["replicas_equal"]
    assert result["samples_per_s"]["1"] > 0


def test_format_table_lists_every_measurement():
    results = {"machine": bench.machine(),
               "allreduce": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10},
               "ring_vs_gloo": [{"world_size": 2, "bytes": 64 * bench.MiB, "ratio": 0.9, "equal": True}],
               "ddp_vs_hand": {"parameters": 4.2e6, "hand_allreduces": 10,
                               "ddp": {"default": {"ratio": 0.8, "buckets": 2}}},
               "scaling": {"samples_per_s": {"1": 100.0, "2": 180.0}, "efficiency": 0.9},
               "launch": {"torchrun_hello_2proc_s": [3.0], "python_import_s": [1.0], "overhead_s": 2.0},
               "suite": {"notebooks": 11, "seconds": 500.0, "passed": True}}
    table = bench.format_table(results)
    for needle in ("ring / gloo throughput, world 2, 64 MiB  ", "0.90x", "DDP / hand-average", "0.80x",
                   "efficiency 0.90", "launch overhead", "2.00 s", "notebook suite", "passed", "2.00 GB/s"):
        assert needle in table, needle
