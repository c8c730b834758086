import json
import os
import pickle
import random
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

from ddp_helpers.checkpoint import (
    atomic_save,
    gather_rng_states,
    load_snapshot,
    map_location_for,
    pretend_saved_on,
    read_snapshot,
    remove_stale_temp_files,
    rng_state,
    save_snapshot,
    set_rng_state,
    stale_temp_files,
    strip_module_prefix,
    unwrap,
)
from ddp_helpers.models import ToyModel


def _train_step(model, optimizer, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 10, generator=g), torch.randn(8, 5, generator=g)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_atomic_save_round_trip_and_no_temp_left(tmp_path):
    path = tmp_path / "a.pt"
    atomic_save({"x": torch.arange(3)}, path)
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.arange(3))
    assert os.listdir(tmp_path) == ["a.pt"]


def test_atomic_save_interrupted_keeps_previous_file(tmp_path):
    path = tmp_path / "a.pt"
    atomic_save({"x": torch.zeros(4)}, path)
    before = path.read_bytes()

    def half_then_fail(obj, f):
        f.write(b"PK\x03\x04 partial bytes")  # a real save that dies half-way
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_save({"x": torch.ones(4)}, path, save_fn=half_then_fail)
    assert path.read_bytes() == before
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.zeros(4))
    assert os.listdir(tmp_path) == ["a.pt"]


def test_atomic_save_unpicklable_object_keeps_previous_file(tmp_path):
    path = tmp_path / "a.pt"
    atomic_save([1, 2], path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        atomic_save({"f": lambda: 0}, path)
    assert torch.load(path, weights_only=True) == [1, 2]
    assert stale_temp_files(path) == []


def test_stale_temp_files_found_and_removed(tmp_path):
    path = tmp_path / "snap.pt"
    leftover = tmp_path / ".snap.pt.abc123.tmp"
    leftover.write_bytes(b"half")
    other = tmp_path / ".other.pt.abc.tmp"
    other.write_bytes(b"x")
    assert stale_temp_files(path) == [leftover]
    assert remove_stale_temp_files(path) == [leftover]
    assert not leftover.exists() and other.exists()


def test_unwrap_and_strip_module_prefix():
    model = ToyModel()
    wrapped = nn.DataParallel(model)  # same `module.` prefix as DDP, no process group needed
    assert unwrap(wrapped) is model and unwrap(model) is model
    sd = wrapped.state_dict()
    assert all(k.startswith("module.") for k in sd)
    stripped = strip_module_prefix(sd)
    assert list(stripped) == list(model.state_dict())
    assert "module.net1.weight" in sd  # the input is not modified
    fresh = ToyModel()
    fresh.load_state_dict(stripped)
    for a, b in zip(fresh.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert "" in stripped._metadata and "net1" in stripped._metadata


def test_map_location_for():
    assert map_location_for("cpu") == "cpu"
    assert map_location_for(torch.device("cpu")) == "cpu"
    assert map_location_for("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError):
        map_location_for("cuda")


def test_pretend_saved_on_records_location(tmp_path):
    path = tmp_path / "g.pt"
    with pretend_saved_on("cuda:0"):
        torch.save({"w": torch.ones(2)}, path)
    seen = []
    torch.load(path, weights_only=True, map_location=lambda s, loc: (seen.append(loc), s)[1])
    assert seen == ["cuda:0"]
    torch.save({"w": torch.ones(2)}, path)  # registry restored afterwards
    seen.clear()
    torch.load(path, weights_only=True, map_location=lambda s, loc: (seen.append(loc), s)[1])
    assert seen == ["cpu"]


def test_rng_state_round_trip_is_weights_only(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # sets gauss_next
    np.random.standard_normal()  # sets numpy's cached gaussian
    atomic_save(rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), random.gauss(0, 1), np.random.rand(), np.random.standard_normal(),
                torch.rand(3))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.random(), random.gauss(0, 1), np.random.rand(), np.random.standard_normal(), torch.rand(3))
    assert got[:4] == expected[:4]
    assert torch.equal(got[4], expected[4])


def test_rng_state_cuda_entry_only_when_cuda_is_in_use():
    state = rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        assert isinstance(state["cuda"], torch.Tensor)
    else:
        assert state["cuda"] is None  # no CUDA context is created just to read a state


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_snapshot_round_trip_resumes_identically(tmp_path, opt_name):
    def make():
        torch.manual_seed(0)
        model = ToyModel()
        opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
               else torch.optim.Adam(model.parameters(), lr=0.01))
        return model, opt

    model, opt = make()
    for step in range(3):
        _train_step(model, opt, step)
    path = tmp_path / "snap.pt"
    torch.manual_seed(42)
    save_snapshot(path, model=nn.DataParallel(model), optimizer=opt, epoch_next=3, extra={"best": 0.5})
    reference_noise = torch.rand(2)
    for step in range(3, 6):
        _train_step(model, opt, step)

    model2, opt2 = make()
    torch.manual_seed(7)
    assert load_snapshot(path, model=model2, optimizer=opt2) == 3
    assert torch.equal(torch.rand(2), reference_noise)  # torch RNG restored
    for step in range(3, 6):
        _train_step(model2, opt2, step)
    for a, b in zip(_params(model), _params(model2), strict=True):
        assert torch.equal(a, b)

    snap = torch.load(path, weights_only=True)  # the weights_only requirement
    assert snap["epoch_next"] == 3 and snap["extra"] == {"best": 0.5}
    assert not any(k.startswith("module.") for k in snap["model"])
    assert read_snapshot(path)["optimizer"]["param_groups"][0]["params"] == [0, 1, 2, 3]


def test_snapshot_scaler_round_trip(tmp_path):
    model = ToyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    save_snapshot(tmp_path / "s.pt", model=model, optimizer=opt, scaler=scaler, epoch_next=1)
    other = torch.amp.GradScaler("cpu", init_scale=2.0, growth_interval=100)
    load_snapshot(tmp_path / "s.pt", model=ToyModel(), optimizer=None, scaler=other, restore_rng=False)
    assert other.get_scale() == 1024.0 and other.get_growth_interval() == 7


def test_load_snapshot_into_ddp_like_wrapper(tmp_path):
    model = ToyModel()
    save_snapshot(tmp_path / "s.pt", model=model, optimizer=None, epoch_next=0)
    target = nn.DataParallel(ToyModel())
    load_snapshot(tmp_path / "s.pt", model=target, restore_rng=False)
    for a, b in zip(model.parameters(), target.module.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="no optimizer"):
        load_snapshot(tmp_path / "s.pt", model=ToyModel(),
                      optimizer=torch.optim.SGD(model.parameters(), lr=1.0))


@pytest.mark.parametrize("bad", [-1, 1.0, True, "3"])
def test_save_snapshot_rejects_bad_epoch(tmp_path, bad):
    with pytest.raises(ValueError):
        save_snapshot(tmp_path / "s.pt", model=ToyModel(), optimizer=None, epoch_next=bad)
    assert os.listdir(tmp_path) == []


def test_read_snapshot_rejects_other_files(tmp_path):
    torch.save({"model": {}}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a snapshot"):
        read_snapshot(tmp_path / "x.pt")


def test_unwrap_real_ddp_single_process(single_rank_group):
    model = ToyModel()
    ddp = nn.parallel.DistributedDataParallel(model)
    assert unwrap(ddp) is model
    assert list(strip_module_prefix(ddp.state_dict())) == list(model.state_dict())


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_atomic_save_gives_the_mode_open_would(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_save({"x": torch.zeros(1)}, tmp_path / "a.pt")
        with open(tmp_path / "plain.pt", "wb"):
            pass
    finally:
        os.umask(old)
    mode = (tmp_path / "a.pt").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask == (tmp_path / "plain.pt").stat().st_mode & 0o777


def test_snapshot_rng_errors_are_clear(tmp_path, monkeypatch):
    from ddp_helpers import checkpoint

    path = tmp_path / "s.pt"
    save_snapshot(path, model=ToyModel(), optimizer=None, epoch_next=1)  # one process: its own RNG
    assert len(read_snapshot(path)["rng"]) == 1 and len(gather_rng_states()) == 1
    monkeypatch.setattr(checkpoint, "_rank_and_world", lambda group=None: (1, 2))  # as rank 1 of 2
    with pytest.raises(ValueError, match="RNG states of 1 rank.*this run has 2.*restore_rng=False"):
        load_snapshot(path, model=ToyModel())
    save_snapshot(path, model=ToyModel(), optimizer=None, epoch_next=1)  # 2 ranks, none gathered
    with pytest.raises(ValueError, match="holds no RNG states.*gather_rng_states"):
        load_snapshot(path, model=ToyModel())
    assert load_snapshot(path, model=ToyModel(), restore_rng=False) == 1
    with pytest.raises(TypeError, match="rng_states must be"):
        save_snapshot(path, model=ToyModel(), optimizer=None, epoch_next=1, rng_states=rng_state())


DROPOUT_RESUME = """
    import json, sys
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_helpers.checkpoint import gather_rng_states, load_snapshot, save_snapshot
    from ddp_helpers.runtime import distributed

    def build(ctx):
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 1)).to(ctx.device))
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def steps(model, opt, ctx, first, last):
        for step in range(first, last):
            x = torch.full((4, 8), float(step), device=ctx.device)
            opt.zero_grad()
            model(x).sum().backward()   # the dropout mask comes from this rank's RNG
            opt.step()

    with distributed() as ctx:
        path = sys.argv[1]
        model, opt = build(ctx)
        torch.manual_seed(100 + ctx.rank)  # per-rank seeds: different dropout masks
        steps(model, opt, ctx, 0, 2)
        rngs = gather_rng_states()
        if ctx.is_main:
            save_snapshot(path, model=model, optimizer=opt, epoch_next=2, rng_states=rngs)
        torch.distributed.barrier()
        steps(model, opt, ctx, 2, 5)
        straight = torch.cat([p.detach().flatten() for p in model.parameters()])
        model, opt = build(ctx)  # "restart": fresh model, a different RNG stream
        torch.manual_seed(999)
        start = load_snapshot(path, model=model, optimizer=opt)
        steps(model, opt, ctx, start, 5)
        resumed = torch.cat([p.detach().flatten() for p in model.parameters()])
        print(json.dumps({"start": start, "equal": torch.equal(straight, resumed)}))
"""


def test_resume_with_per_rank_dropout_equals_the_uninterrupted_run(tmp_path):
    from ddp_helpers import torchrun

    script = tmp_path / "dropout_resume.py"
    script.write_text(textwrap.dedent(DROPOUT_RESUME))
    result = torchrun(script, nproc=2, args=[tmp_path / "snap.pt"], live="quiet", summary=False)
    for rank in (0, 1):
        assert json.loads(result.stdout[rank][-1]) == {"start": 2, "equal": True}
    assert len(read_snapshot(tmp_path / "snap.pt")["rng"]) == 2
