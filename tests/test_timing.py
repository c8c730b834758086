"""ddp_helpers.timing: the clock waits for the GPU, spreads and the 'measurable difference' rule."""

import time

import pytest
import torch

from ddp_helpers import timing


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


def test_only_disjoint_interquartile_ranges_are_a_difference():
    fast, slow, overlapping = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [3, 4, 5, 6, 7]
    assert timing.measurable(fast, slow) and timing.measurable(slow, fast)
    assert not timing.measurable(fast, overlapping)
    assert timing.verdict("A", fast, "B", slow) == "A is 2.67x faster than B"
    assert timing.verdict("A", slow, "B", fast) == "B is 2.67x faster than A"
    assert timing.verdict("A", fast, "B", overlapping) == "A vs B: no measurable difference"


def test_load_average_is_a_number():
    assert timing.load_average() >= 0
