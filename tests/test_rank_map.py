"""The rank map of notebook 00 (ddp_helpers.viz.rank_map): right labels, and no picture of a launch that
cannot exist."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

import ddp_helpers.viz  # noqa: F401  (print-sized rcParams, as in a notebook)
from ddp_helpers.viz.rank_map import process_labels, rank_map, rank_records


def layout(nnodes=2, nproc=2, **extra):
    return [{"RANK": node * nproc + local, "LOCAL_RANK": local, "GROUP_RANK": node, "WORLD_SIZE": nnodes * nproc,
             "LOCAL_WORLD_SIZE": nproc, "device": "cpu", **extra} for node in range(nnodes) for local in range(nproc)]


def texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


def test_two_by_two_labels():
    fig = rank_map(reversed(layout(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")))  # any order
    try:
        assert process_labels(fig) == [f"process\nRANK={r}\nLOCAL_RANK={r % 2}\ndevice cpu" for r in range(4)]
        assert "node 0 (GROUP_RANK=0)" in texts(fig) and "node 1 (GROUP_RANK=1)" in texts(fig)
        assert "rendezvous store\n127.0.0.1:29500" in texts(fig)
        assert fig.axes[0].get_title(loc="left").endswith("2 node(s) x 2 process(es), WORLD_SIZE=4")
    finally:
        plt.close(fig)


def test_launch_lines_as_strings_are_accepted_and_sorted():
    rows = rank_records([{k: str(v) for k, v in rec.items()} for rec in reversed(layout(1, 3))])
    assert [r["RANK"] for r in rows] == [0, 1, 2] and rows[2]["LOCAL_RANK"] == 2


def test_without_an_address_the_store_is_named_by_its_variables():
    fig = rank_map(layout(1, 2))
    try:
        assert "rendezvous store\nMASTER_ADDR:MASTER_PORT" in texts(fig)
    finally:
        plt.close(fig)


def broken(kind):
    recs = layout()
    if kind == "duplicate rank":
        recs[3]["RANK"] = 2
    elif kind == "missing rank":
        recs = recs[:3]
    elif kind == "rank not node * local_world + local":
        recs[1]["LOCAL_RANK"], recs[0]["LOCAL_RANK"] = 0, 1
    elif kind == "two world sizes":
        recs[2]["WORLD_SIZE"] = 8
    elif kind == "two stores":
        recs = [{**r, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500 + (r["RANK"] == 3)} for r in recs]
    elif kind == "no device":
        del recs[0]["device"]
    elif kind == "nothing":
        recs = []
    return recs


@pytest.mark.parametrize("kind", ["duplicate rank", "missing rank", "rank not node * local_world + local",
                                  "two world sizes", "two stores", "no device", "nothing"])
def test_inconsistent_records_are_refused(kind):
    with pytest.raises(ValueError):
        rank_map(broken(kind))
