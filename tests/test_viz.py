"""ddp_helpers.viz and ddp_helpers.processes: the figures drawn by code, the launch records, the widgets' PNG fallback."""

import json
import os
import socket
import textwrap

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_helpers.checkpoint import restart_events
from ddp_helpers.processes import launch_record, load_launch_records, save_launch_record
from ddp_helpers.viz.diagrams import launch_tree, parallelism_overview
from ddp_helpers.viz.figures import png_bytes
from ddp_helpers.viz.timelines import checkpoint_flow, ddp_step_timeline, timeline_steps

NOTEBOOK_04_TIMELINE = ["grad 4.bias", "grad 4.weight", "all-reduce bucket 0", "grad 2.bias", "grad 2.weight",
                        "all-reduce bucket 1", "grad 0.bias", "grad 0.weight", "all-reduce bucket 2"]


def all_text(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts + [ax.title, ax._left_title])


def test_png_bytes_closes_the_figure():
    fig = plt.figure()
    png = png_bytes(fig)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and not plt.fignum_exists(fig.number)


def test_parallelism_overview_has_four_labelled_panels():
    fig = parallelism_overview()
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert [t.split(":")[0] for t in titles] == ["Data parallelism", "Model parallelism",
                                                 "nn.DataParallel (DP)", "DistributedDataParallel (DDP)"]
    text = all_text(fig)
    for claim in ("full copy", "layer 2 only", "activations", "one thread per GPU", "replicate",
                  "only gradients travel", "broadcast once", "1 process per GPU"):
        assert claim in text, claim
    plt.close(fig)


def record(rank, agent, port=29500, owner="agent", local_rank=None):
    return {"rank": rank, "local_rank": rank if local_rank is None else local_rank, "world_size": 2,
            "group_rank": 0, "pid": 100 + rank, "ppid": agent, "agent_pid": agent, "agent_ppid": 7,
            "agent_cmdline": ["/x/bin/python", "-m", "torch.distributed.run", "--tee=3"],
            "master_addr": "127.0.0.1", "master_port": port, "use_agent_store": True, "store_owner": owner}


def test_launch_tree_draws_agents_workers_and_store():
    fig = launch_tree([record(1, 50), record(0, 50)])
    text = all_text(fig)
    assert "1 agent(s), 2 worker(s)" in text and "agent (torchrun), pid 50" in text
    words = " ".join(text.split())  # the figure breaks its lines to print at 8 pt on A4
    assert "python -m torch.distributed.run" in words and "hosts the TCPStore on 127.0.0.1:29500" in words
    assert "worker, pid 100\nRANK=0\nLOCAL_RANK=0" in text and "pid 7" in text
    plt.close(fig)
    two_nodes = [record(0, 50), record(1, 50), record(2, 60, owner=None, local_rank=0),
                 record(3, 60, owner=None, local_rank=1)]
    fig = launch_tree(two_nodes)
    text = all_text(fig)
    assert "2 agent(s), 4 worker(s)" in text and text.count("hosts the TCPStore") == 1
    plt.close(fig)
    with pytest.raises(ValueError):
        launch_tree([])


def test_launch_record_finds_the_process_listening_on_master_port(monkeypatch, tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("MASTER_PORT", str(port))
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "1")
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
        rec = save_launch_record(tmp_path)
    assert rec["pid"] == os.getpid() and rec["agent_pid"] == os.getppid() and rec["rank"] == 3
    assert rec["store_owner"] == "worker" and rec["use_agent_store"] is False  # this process listens
    with pytest.raises(ValueError):  # rank 3 of a world of 1: not one launch
        load_launch_records(tmp_path)
    monkeypatch.setenv("RANK", "0")
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        (tmp_path / "rank3.json").unlink()
        rec = save_launch_record(tmp_path)
    assert load_launch_records(tmp_path) == [rec] and rec["store_owner"] == "worker"
    assert json.loads((tmp_path / "rank0.json").read_text()) == rec
    assert launch_record()["store_owner"] is None  # closed now: nobody listens


def test_launch_record_reads_processes_through_psutil_only():
    """macOS has no /proc: the record asks psutil (which reads /proc on Linux and the system's calls
    elsewhere), never /proc itself. Static: on this Linux machine psutil itself needs /proc."""
    import ast
    import inspect

    from ddp_helpers import processes

    tree = ast.parse(inspect.getsource(processes))
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert not [text for text in literals if text.startswith("/proc")]  # no path of /proc (docstrings may name it)
    assert any(isinstance(n, ast.Attribute) and n.attr == "Process" for n in ast.walk(tree))


def test_launch_records_of_a_real_torchrun_launch(ranks_json):
    """Under torchrun the workers' parent is the agent, and the agent hosts the store."""
    records = ranks_json(textwrap.dedent("""
        import json
        from ddp_helpers.processes import launch_record
        from ddp_helpers.runtime import distributed
        with distributed():
            print(json.dumps(launch_record()))
    """))
    assert [r["rank"] for r in records] == [0, 1] and len({r["pid"] for r in records}) == 2
    assert len({r["agent_pid"] for r in records}) == 1 and records[0]["agent_ppid"] == os.getpid()
    assert records[0]["agent_cmdline"][1:3] == ["-m", "torch.distributed.run"]
    assert all(r["use_agent_store"] and r["store_owner"] == "agent" for r in records)
    fig = launch_tree(records)
    assert f"agent (torchrun), pid {records[0]['agent_pid']}" in all_text(fig)
    plt.close(fig)


def test_restart_events_from_notebook_05_output():
    killed = ["epoch 0: loss 11.5", "epoch 1: loss 10.0", "attempt 1: resumed from snapshot, next epoch 2",
              "epoch 2: loss 6.6", "epoch 3: loss 3.1"]
    events = restart_events(killed)
    assert [(e["attempt"], e["kind"], e["epoch"]) for e in events] == [
        (0, "epoch_end", 0), (0, "epoch_end", 1), (0, "kill", 2), (1, "resume", 2),
        (1, "epoch_end", 2), (1, "epoch_end", 3)]
    stopped = ["epoch 0: x", "epoch 1: x", "attempt 0: resumed from snapshot, next epoch 2", "epoch 2: x"]
    assert [e["kind"] for e in restart_events(stopped)] == ["epoch_end", "epoch_end", "stop", "resume",
                                                              "epoch_end"]


def test_checkpoint_flow_save_barrier_load_and_timeline():
    fig = checkpoint_flow()
    assert len(fig.axes) == 2
    text = " ".join(all_text(fig).split())  # words, whatever the line breaks
    for step in ("snapshot.pt.tmp", "os.fsync", "os.replace", "dist.barrier()", "map_location",
                 "weights_only=True", "attempt 0", "attempt 1", "killed in epoch 2", "next=2"):
        assert step in text, step
    assert text.count("torch.load(") == 2  # every rank loads
    plt.close(fig)
    events = restart_events(["epoch 0:", "attempt 0: resumed from snapshot, next epoch 1", "epoch 1:"])
    fig = checkpoint_flow(events, nproc=3)
    text = " ".join(all_text(fig).split())
    assert "stopped in epoch 1" in text and text.count("torch.load(") == 3 and "attempt 1" not in text
    plt.close(fig)
    with pytest.raises(ValueError):
        checkpoint_flow([])


def test_timeline_steps_groups_gradients_into_buckets():
    steps = timeline_steps(NOTEBOOK_04_TIMELINE)
    buckets = [(label, members) for kind, label, members in steps if kind == "allreduce"]
    assert buckets == [("bucket 0", ["4.bias", "4.weight"]), ("bucket 1", ["2.bias", "2.weight"]),
                       ("bucket 2", ["0.bias", "0.weight"])]
    with pytest.raises(ValueError):
        timeline_steps(["forward"])


def test_ddp_step_timeline_lanes():
    fig = ddp_step_timeline(NOTEBOOK_04_TIMELINE)
    text = all_text(fig)
    assert "forward\n0 → 2 → 4" in text  # layers in forward order, from the gradients' names
    assert text.count("grad\n") == 6 and text.count("all-reduce\nbucket") == 3
    ax = fig.axes[0]
    boxes = {t.get_text(): t.get_position() for t in ax.texts}
    # bucket 0 is launched before layer 2's gradients: left of them on the x axis
    assert boxes["all-reduce\nbucket 0\n(2 grads)"][0] < boxes["grad\n2.weight"][0]
    plt.close(fig)
    with pytest.raises(ValueError):
        ddp_step_timeline(["all-reduce bucket 0"])
