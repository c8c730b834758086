"""The walkthrough's state strip (ddp_helpers.viz.state_strip), its recorder (ddp_helpers.walk_record)
and the no_sync accumulation timeline (ddp_helpers.viz.accumulation)."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ddp_helpers.viz.accumulation import no_sync_timeline, window_facts
from ddp_helpers.viz.state_strip import StripRow, state_strip, strip_facts
from ddp_helpers.walk_record import read_record, record_env

WALK = Path(__file__).resolve().parent.parent / "notebooks" / "walkthrough"
PLAIN = list(range(0, 64, 2))                     # a plain batch of 32 samples
RANK0, RANK1 = PLAIN[0::2], PLAIN[1::2]           # its two halves, as DistributedSampler deals them


def test_facts_of_the_rows_the_notebook_draws():
    same_work = strip_facts({0: PLAIN, 1: PLAIN}, PLAIN)
    assert (same_work["global_batch"], same_work["distinct"], same_work["same_as_reference"]) == (64, 32, False)
    own_batches = strip_facts({0: PLAIN[:16] + list(range(100, 116)), 1: PLAIN[16:] + list(range(200, 216))}, PLAIN)
    assert own_batches["global_batch"] == 64 and own_batches["outside"] == {0: 16, 1: 16}
    split = strip_facts({0: RANK0, 1: RANK1}, PLAIN)
    assert split == {"global_batch": 32, "distinct": 32, "per_rank": {0: 16, 1: 16}, "outside": {0: 0, 1: 0},
                     "same_as_reference": True}
    assert strip_facts({0: PLAIN}, PLAIN)["same_as_reference"]


def test_facts_refuse_wrong_input():
    assert not strip_facts({0: RANK0, 1: RANK0}, PLAIN)["same_as_reference"]   # one half twice
    assert not strip_facts({0: RANK0}, PLAIN)["same_as_reference"]             # half the batch
    with pytest.raises(ValueError, match="record_env"):
        strip_facts({0: RANK0, 1: []}, PLAIN)
    with pytest.raises(ValueError, match="record_env"):
        strip_facts({}, PLAIN)
    with pytest.raises(ValueError, match="no rows"):
        state_strip([], PLAIN)


def test_strip_draws_one_cell_per_reference_sample_and_lane():
    rows = [StripRow("step 1", {0: PLAIN}, None), StripRow("step 4", {0: RANK0 + [99] * 16, 1: RANK1}, False),
            StripRow("step 7", {0: RANK0, 1: RANK1}, True)]
    fig = state_strip(rows, PLAIN)
    ax = fig.axes[0]
    assert len(ax.patches) == 32 * (1 + 2 + 2)
    filled = [p for p in ax.patches if p.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
    assert len(filled) == 32 + 32 + 32
    texts = [t.get_text() for t in ax.texts]
    assert {"equal", "differ", "one model", "+16", "32 = 2×16"} <= set(texts)
    plt.close(fig)


def test_the_recorder_notes_the_first_batch_and_the_final_weights(tmp_path):
    env = {**os.environ, **record_env(tmp_path / "record")}
    run = subprocess.run([sys.executable, str(WALK / "step1_seeded_shuffle.py"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)  # from this folder, as record_env's path is
    assert run.returncode == 0, run.stderr[-2000:]
    record = read_record(tmp_path / "record")
    import torch

    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert list(record) == [0] and len(record[0]["first_batch"]) == 32
    assert all(torch.equal(a, b) for a, b in zip(record[0]["weights"], saved.values(), strict=True))
    with pytest.raises(FileNotFoundError, match="record_env"):
        read_record(tmp_path / "nothing")


def test_record_env_names_no_absolute_path():
    env = record_env("runs/x")
    assert env["WALK_RECORD"] == "runs/x"
    assert not env["PYTHONPATH"].split(os.pathsep)[0].startswith("/")


STEP = ["grad 4.bias", "grad 4.weight", "all-reduce bucket 0", "grad 2.bias", "grad 2.weight",
        "all-reduce bucket 1", "grad 0.bias", "grad 0.weight", "all-reduce bucket 2"]
LOCAL = [e for e in STEP if e.startswith("grad")]


def test_no_sync_window():
    assert window_facts([LOCAL, LOCAL, STEP]) == [{"grads": 6, "allreduces": 0}] * 2 + [{"grads": 6, "allreduces": 3}]
    fig = no_sync_timeline([LOCAL, LOCAL, STEP])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("no all-reduce\n(no_sync)") == 2 and sum(t.startswith("all-reduce\n") for t in texts) == 3
    plt.close(fig)
    with pytest.raises(ValueError, match="no micro-batch"):
        no_sync_timeline([])
    with pytest.raises(ValueError, match="gradient events"):
        no_sync_timeline([[], STEP])
