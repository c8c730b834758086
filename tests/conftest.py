"""Fixtures shared by the unit tests."""

import pytest
import torch.distributed as dist


@pytest.fixture
def single_rank_group(tmp_path):
    """A one-process gloo group (file:// rendezvous): collectives run without torchrun."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
