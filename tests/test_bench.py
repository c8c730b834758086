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


def test_step_controls_agree_and_count_calls(single_rank_group):
    r = bench.step_controls(width=32, depth=2, batch=4, steps=3, warmup=1, bucket_caps=(None, 0.001))
    v = r["variants"]
    assert list(v) == [bench.ALONE, bench.NO_COMM, bench.PER_TENSOR, bench.FLAT, "DDP cap default", "DDP cap 0.001"]
    assert [v[k]["allreduces"] for k in v] == [0, 0, 6, 1, 1, 3]
    for key in (bench.FLAT, "DDP cap default", "DDP cap 0.001"):
        assert v[key]["max_diff"] <= 1e-6          # the same average, however it is communicated
    for x in v.values():
        s = x["spread"]
        assert len(x["seconds"]) == s["n"] == 3 and s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
    assert set(r["efficiency"]) == set(v) - {bench.ALONE} and len(r["load"]) == 2


def test_flat_average_is_one_call_and_equals_per_tensor(single_rank_group):
    a, b = bench.make_mlp(16, 2), bench.make_mlp(16, 2)
    for m in (a, b):
        bench.F.cross_entropy(m(bench.torch.ones(3, 16)), bench.torch.tensor([0, 1, 2])).backward()
    assert bench.flat_average_gradients(a) == 1 and bench.average_gradients(b) == 6
    assert all(bench.torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_overlap_timeline_interleaves_buckets_with_backward(single_rank_group):
    timeline, buckets = bench.overlap_timeline(width=32, depth=2, batch=4, bucket_cap_mb=0.001)
    assert buckets == 3 and timeline.count("all-reduce bucket 0") == 1
    last_grad = max(i for i, e in enumerate(timeline) if e.startswith("grad "))
    assert timeline.index("all-reduce bucket 0") < last_grad   # launched during backward


def test_residuals_and_the_range_where_the_model_holds():
    sizes = [1, 2, 4, 8, 16, 32]
    seconds = [10 + n for n in sizes]
    seconds[0] *= 2      # +100 %: off the model
    seconds[3] *= 1.1    # +10 %: within 25 %
    res = bench.fit_residuals(sizes, seconds, 10, 1)
    assert res[0] == pytest.approx(1.0) and res[3] == pytest.approx(0.1) and res[5] == 0
    assert bench.model_holds(sizes, res) == (2, 32)
    assert bench.model_holds(sizes, res, tolerance=0.05) == (2, 4)   # ties: the first run
    assert bench.model_holds(sizes, [1.0] * 6) is None
    ab = bench.alpha_beta({"bytes": sizes, "seconds": [10 + n for n in sizes]})
    assert ab["holds_bytes"] == [1, 32] and ab["alpha_s"] == pytest.approx(10)


def test_compare_collectives_takes_one_setup_per_name(single_rank_group):
    log = []
    bench.compare_collectives({"a": lambda: log.append("a"), "b": lambda: log.append("b")}, repeats=1,
                              warmup=0, setup={"a": lambda: log.append("set a"), "b": lambda: log.append("set b")})
    assert log == ["set a", "a", "set b", "b"]


def test_format_table_lists_every_measurement():
    spread = {"n": 3, "min": 0.01, "q1": 0.01, "median": 0.02, "q3": 0.03, "max": 0.04}
    controls = {"parameters": 4.2e6, "batch": 32, "world_size": 2,
                "variants": {name: {"seconds": [s, s, s], "spread": spread, "allreduces": calls}
                             for name, s, calls in [(bench.ALONE, 0.01, 0), (bench.NO_COMM, 0.011, 0),
                                                    (bench.PER_TENSOR, 0.03, 10), (bench.FLAT, 0.02, 1),
                                                    ("DDP cap default", 0.02, 2)]},
                "efficiency": {bench.NO_COMM: 0.9, "DDP cap default": 0.5}}
    results = {"machine": {**bench.machine(), "load_average_1min_end": 0.5},
               "allreduce": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10, "world_size": 2, "tolerance": 0.25,
                             "holds_bytes": [bench.MiB, 64 * bench.MiB]},
               "ring_vs_gloo": [{"world_size": 2, "bytes": 64 * bench.MiB, "ratio": 0.9, "equal": True}],
               "controls": controls,
               "hooks": {"variants": {"fp16": {"payload_bytes": 100, "allreduces": 1, "loss": 1.5,
                                               "replicas_equal": True, "spread": spread}}},
               "compile": {"variants": {"x": {"graphs": 1, "subgraphs": 4, "graph_breaks": 0, "equal": True}}},
               "launch": {"torchrun_hello_2proc_s": [3.0], "python_import_s": [1.0], "overhead_s": 2.0},
               "suite": {"notebooks": 11, "seconds": 500.0, "passed": True}}
    table = bench.format_table(results)
    for needle in ("ring / gloo throughput, world 2, 64 MiB  ", "0.90x", "2.00 GB/s", "from 1024 KiB to 65536 KiB",
                   "step, flat all-reduce", "20.0 ms [10.0-40.0], 1 all-reduces", "efficiency 1 -> 2 processes",
                   "flat all-reduce is 1.50x faster than per-tensor all-reduce",
                   "DDP cap default vs flat all-reduce: no measurable difference",
                   "hook fp16", "100 B/step", "4 after bucket splits", "launch overhead", "2.00 s",
                   "notebook suite", "passed", "-> 0.5"):
        assert needle in table, needle


def test_markdown_table_has_the_same_rows():
    results = {"machine": bench.machine(), "allreduce": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10, "world_size": 2,
                                                         "tolerance": 0.25, "holds_bytes": None}}
    md = bench.format_markdown(results).splitlines()
    assert md[:2] == ["| measurement | value |", "|---|---|"] and len(md) == 2 + len(bench.table_rows(results))
    assert "holds nowhere" in md[-1]
