"""Fixtures shared by the unit tests."""

import json

import pytest
import torch.distributed as dist


@pytest.fixture
def single_rank_group(tmp_path):
    """A one-process gloo group (file:// rendezvous): collectives run without torchrun."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def ranks_json(tmp_path):
    """Run a worker's source on N ranks; return each rank's last stdout line parsed as JSON."""
    from ddp_helpers import torchrun

    def run(source: str, nproc: int = 2) -> list:
        script = tmp_path / "worker.py"
        script.write_text(source)
        result = torchrun(script, nproc=nproc, live="quiet", summary=False, timeout=120)
        return [json.loads(result.stdout[rank][-1]) for rank in range(nproc)]

    return run


def pytest_configure(config):
    # The notebooks' worker scripts (notebooks/scripts/, git-ignored) are written by their %%writefile
    # cells; tests that launch or read them must not depend on a notebook having run first.
    from ddp_helpers.series import write_worker_scripts

    write_worker_scripts()
    config.addinivalue_line(
        "markers", "restarts: torchrun restart launches; once in `make unit`, repeated by `make stress`")
    config.addinivalue_line(
        "markers", "student_notebooks: each student notebook's starters and checks in a kernel "
        "(tests/test_student_notebooks.py); run by `make unit`, alone with `pytest -m student_notebooks`")

