"""ddp_helpers.perf.timing: the clock waits for the GPU, spreads, the 'measurable difference' rule,
the alpha-beta arithmetic, and timing inside a (one-rank) process group.

No assertion is about speed: the machine may be loaded; only what the measurements compute.
"""

import time

import pytest
import torch

from ddp_helpers.perf import timing


def test_elapsed_times_the_call_on_the_cpu():
    assert timing.elapsed(lambda: time.sleep(0.01)) >= 0.01
    assert timing.elapsed(lambda: None, device="cpu") >= 0


def test_clock_synchronizes_cuda_devices_only(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(torch.device(device)))
    timing.elapsed(lambda: None, device="cpu")
    assert synced == []
    timing.elapsed(lambda: synced.append("work"), device=torch.device("cuda", 1))
    assert synced == [torch.device("cuda", 1), "work", torch.device("cuda", 1)]  # before and after


def test_spread_orders_its_statistics():
    s = timing.spread([5, 1, 4, 2, 3])
    assert s == {"n": 5, "min": 1, "q1": 2, "median": 3, "q3": 4, "max": 5}
    assert timing.spread([7])["q1"] == timing.spread([7])["q3"] == 7
    with pytest.raises(ValueError):
        timing.spread([])
    assert timing.ms_spread(timing.spread([0.01, 0.02, 0.04])) == "20.0 ms [10.0-40.0]"


def test_only_disjoint_interquartile_ranges_are_a_difference():
    fast, slow, overlapping = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [3, 4, 5, 6, 7]
    assert timing.measurable(fast, slow) and timing.measurable(slow, fast)
    assert not timing.measurable(fast, overlapping)
    assert timing.verdict("A", fast, "B", slow) == "A is 2.67x faster than B"
    assert timing.verdict("A", slow, "B", fast) == "B is 2.67x faster than A"
    assert timing.verdict("A", fast, "B", overlapping) == "A vs B: no measurable difference"


def test_load_average_and_machine():
    assert timing.load_average() >= 0
    m = timing.machine()
    assert m["torch"] == torch.__version__ and m["cpu_count"] >= 1 and m["load_average_1min"] >= 0


def test_message_sizes_cover_4kib_to_64mib():
    sizes = timing.message_sizes()
    assert sizes[0] == 4 * timing.KiB and sizes[-1] == 64 * timing.MiB
    assert all(b == 4 * a for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    assert timing.message_sizes(10, 100, 3) == [10, 30, 90]
    with pytest.raises(ValueError):
        timing.message_sizes(0, 10)


def test_fit_recovers_alpha_and_beta_exactly():
    sizes = timing.message_sizes()
    alpha, beta = 50e-6, 1 / 2e9
    seconds = [alpha + beta * n for n in sizes]
    a, b = timing.fit_latency_bandwidth(sizes, seconds)
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)


def test_fit_weights_small_messages():
    # 10% noise on the largest point must not wreck the latency estimate
    sizes = timing.message_sizes()
    seconds = [50e-6 + n / 2e9 for n in sizes]
    seconds[-1] *= 1.1
    a, _ = timing.fit_latency_bandwidth(sizes, seconds)
    assert a == pytest.approx(50e-6, rel=0.2)
    with pytest.raises(ValueError):
        timing.fit_latency_bandwidth([1], [1.0])


def test_bus_bandwidth_and_efficiency():
    assert timing.bus_bandwidth(100, 1.0, 2) == 100          # 2(N-1)/N = 1 for N = 2
    assert timing.bus_bandwidth(100, 1.0, 4) == 150
    assert timing.scaling_efficiency(100, 180, 2) == 0.9


def test_residuals_and_the_range_where_the_model_holds():
    sizes = [1, 2, 4, 8, 16, 32]
    seconds = [10 + n for n in sizes]
    seconds[0] *= 2      # +100 %: off the model
    seconds[3] *= 1.1    # +10 %: within 25 %
    res = timing.fit_residuals(sizes, seconds, 10, 1)
    assert res[0] == pytest.approx(1.0) and res[3] == pytest.approx(0.1) and res[5] == 0
    assert timing.model_holds(sizes, res) == (2, 32)
    assert timing.model_holds(sizes, res, tolerance=0.05) == (2, 4)   # ties: the first run
    assert timing.model_holds(sizes, [1.0] * 6) is None
    ab = timing.alpha_beta({"bytes": sizes, "seconds": [10 + n for n in sizes]})
    assert ab["holds_bytes"] == [1, 32] and ab["alpha_s"] == pytest.approx(10)


def test_time_collective_and_compare(single_rank_group):
    assert timing.default_device() == torch.device("cpu")   # gloo
    calls = []
    times = timing.time_collective(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(times) == 3 and all(t >= 0 for t in times) and len(calls) == 5
    order = []
    both = timing.compare_collectives({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                      repeats=2, warmup=0)
    assert order == ["a", "b", "b", "a"]       # the order rotates each round
    assert sorted(both) == ["a", "b"] and all(len(v) == 2 for v in both.values())


def test_compare_collectives_takes_one_setup_per_name(single_rank_group):
    log = []
    timing.compare_collectives({"a": lambda: log.append("a"), "b": lambda: log.append("b")}, repeats=1,
                               warmup=0, setup={"a": lambda: log.append("set a"), "b": lambda: log.append("set b")})
    assert log == ["set a", "a", "set b", "b"]
