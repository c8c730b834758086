"""The runtime helper's choices, without starting processes (launches are in test_launch.py)."""

import pytest
import torch

from ddp_helpers import runtime


@pytest.fixture(autouse=True)
def no_forced_backend(monkeypatch):
    monkeypatch.delenv("DDP_BACKEND", raising=False)


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


def test_setup_outside_torchrun_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="Launch it with torchrun"):
        runtime.setup()


def test_print0_outside_a_group_prints(capsys):
    runtime.print0("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"
