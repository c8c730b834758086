"""The runtime helper's choices, without starting processes (launches are in test_launch.py)."""

import pytest
import torch

from ddp_helpers import runtime


@pytest.fixture(autouse=True)
def no_forced_backend(monkeypatch):
    monkeypatch.delenv("DDP_BACKEND", raising=False)
    monkeypatch.delenv(runtime.SHARE_GPUS_ENV, raising=False)


def test_cpu_only_machine_gets_gloo(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.choose_backend(2) == ("gloo", "cpu")


def test_enough_gpus_get_nccl(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert runtime.choose_backend(4) == ("nccl", "cuda")
    assert runtime.choose_backend(8) == ("gloo", "cpu")  # not one GPU per process


def test_forced_backends(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("DDP_BACKEND", "gloo")
    assert runtime.choose_backend(2) == ("gloo", "cpu")
    monkeypatch.setenv("DDP_BACKEND", "nccl")
    with pytest.raises(RuntimeError, match="needs 2 visible GPUs"):
        runtime.choose_backend(2)
    monkeypatch.setenv("DDP_BACKEND", "mpi")
    with pytest.raises(ValueError, match="'gloo' or 'nccl'"):
        runtime.choose_backend(2)


def gpus(monkeypatch, count):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_ranks_share_the_gpus_over_gloo_only_when_asked(monkeypatch):
    gpus(monkeypatch, 1)
    assert runtime.choose_backend(2) == ("gloo", "cpu")  # the default: two processes, one GPU -> CPU
    monkeypatch.setenv(runtime.SHARE_GPUS_ENV, "1")
    assert runtime.choose_backend(2) == ("gloo", "cuda")
    assert runtime.choose_backend(1) == ("gloo", "cuda")  # asked to share: gloo even when nccl could run
    monkeypatch.setenv("DDP_BACKEND", "gloo")
    assert runtime.choose_backend(2) == ("gloo", "cuda")
    monkeypatch.setenv(runtime.SHARE_GPUS_ENV, "0")
    assert runtime.choose_backend(2) == ("gloo", "cpu")


@pytest.mark.parametrize("share, backend, count, error, words", [
    ("1", "nccl", 1, ValueError, "NCCL refuses two ranks on one GPU"),
    ("1", None, 0, RuntimeError, "needs a visible GPU"),
    ("yes", None, 1, ValueError, "must be 1"),
])
def test_sharing_refuses_what_cannot_run(monkeypatch, share, backend, count, error, words):
    gpus(monkeypatch, count)
    monkeypatch.setenv(runtime.SHARE_GPUS_ENV, share)
    if backend:
        monkeypatch.setenv("DDP_BACKEND", backend)
    with pytest.raises(error, match=words):
        runtime.choose_backend(2)


@pytest.mark.parametrize("share, local_rank, count, expected", [
    ("1", "1", 1, ("gloo", "cuda:0", [0], False)),  # both ranks on the one GPU
    ("1", "3", 2, ("gloo", "cuda:1", [1], False)),  # round robin over two
    ("", "1", 2, ("nccl", "cuda:1", [1], True)),    # a GPU each: nccl, bound at init
])
def test_setup_places_each_rank_on_its_gpu(monkeypatch, share, local_rank, count, expected):
    for name, value in (("RANK", local_rank), ("WORLD_SIZE", "4"), ("LOCAL_RANK", local_rank),
                        ("LOCAL_WORLD_SIZE", "2"), (runtime.SHARE_GPUS_ENV, share)):
        monkeypatch.setenv(name, value)
    gpus(monkeypatch, count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    calls = []
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    ctx = runtime.setup()
    assert (ctx.backend, str(ctx.device), ctx.device_ids, "device_id" in calls[0][1]) == expected
    assert calls[0][0] == ctx.backend


def test_setup_outside_torchrun_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="Launch it with torchrun"):
        runtime.setup()


def test_print0_outside_a_group_prints(capsys):
    runtime.print0("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"


@pytest.fixture
def fake_init(monkeypatch):
    """setup() as rank 0 of 1, with init_process_group recorded instead of run."""
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = []
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda *a, **kw: calls.append(kw))
    return calls


def test_explicit_timeout_wins_over_the_environment(monkeypatch, fake_init):
    monkeypatch.setenv("DDP_TIMEOUT_S", "3")
    runtime.setup(timeout_s=10)
    runtime.setup()
    monkeypatch.delenv("DDP_TIMEOUT_S")
    runtime.setup()
    # 60 s: the documented default (resolve_timeout's docstring; notebook 05 asserts it too)
    assert [kw["timeout"].total_seconds() for kw in fake_init] == [10, 3, 60]
    assert all("store" not in kw for kw in fake_init)  # torch's env:// store, no private one


@pytest.mark.parametrize("env, arg, words", [
    ("soon", None, "DDP_TIMEOUT_S must be a number"),
    ("-1", None, "positive number of seconds"),
    (None, 0, "positive number of seconds"),
    (None, "5", "positive number of seconds"),
])
def test_bad_timeouts_are_refused(monkeypatch, env, arg, words):
    if env is None:
        monkeypatch.delenv("DDP_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("DDP_TIMEOUT_S", env)
    with pytest.raises(ValueError, match=words):
        runtime.resolve_timeout(arg)


def test_no_gloo_workers_means_nothing_to_wait_for():
    assert runtime._busy_gloo_workers() == 0  # this test process has no process group
    assert runtime.wait_for_gloo_workers(timeout_s=1.0) is True


@pytest.mark.parametrize("device, expected", [("cpu", None), ("cuda:1", [1]), ("cuda:0", [0])])
def test_device_ids_follow_the_device(device, expected):
    ctx = runtime.DistContext(rank=3, local_rank=1, world_size=4, local_world_size=2,
                              backend="gloo", device=torch.device(device))
    assert ctx.device_ids == expected
