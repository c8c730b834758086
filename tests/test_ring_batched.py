"""The ring all-reduce issues its point-to-point traffic in the form NCCL needs.

On NCCL, lone isend/irecv calls on one group are serialized, so a ring whose first call on every
rank is a receive deadlocks; each step's send and receive must go out together through
``dist.batch_isend_irecv``. Gloo does not care, so the CPU cannot show the deadlock: this test
records every point-to-point call the ring makes instead.
"""

import textwrap

WORKER = textwrap.dedent('''
    import json
    import threading

    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from ddp_helpers.ring import ring_all_reduce
    from ddp_helpers.runtime import distributed

    inside, direct, batches = threading.local(), [], []
    original = {"isend": c10d.isend, "irecv": c10d.irecv, "batch": dist.batch_isend_irecv}

    def watched(kind):
        def call(*args, **kwargs):
            if not getattr(inside, "batch", False):
                direct.append(kind)
            return original[kind](*args, **kwargs)
        return call

    def batch(ops):
        batches.append([("send" if op.op is c10d.isend else "recv", op.peer) for op in ops])
        inside.batch = True
        try:
            return original["batch"](ops)
        finally:
            inside.batch = False

    for kind in ("isend", "irecv"):  # _check_op and batch_isend_irecv compare with c10d's own
        setattr(c10d, kind, watched(kind))
        setattr(dist, kind, getattr(c10d, kind))
    dist.batch_isend_irecv = batch

    with distributed() as ctx:
        x = torch.arange(1000, dtype=torch.float32, device=ctx.device) * (ctx.rank + 1)
        expected = x.clone()
        dist.all_reduce(expected)
        ring_all_reduce(x, segment_bytes=400, window=2)  # 334 values a chunk: 4 segments
        print(json.dumps({"rank": ctx.rank, "equal": torch.equal(x, expected), "direct": direct,
                          "batches": batches}))
''')


def test_every_send_and_receive_goes_out_in_a_batch(ranks_json):
    n = 3
    for row in ranks_json(WORKER, nproc=n):
        rank = row["rank"]
        assert row["equal"]
        assert row["direct"] == []  # no lone isend/irecv outside a batch
        right, left = (rank + 1) % n, (rank - 1) % n
        assert len(row["batches"]) == 2 * (n - 1) * 4  # one batch per step and segment
        for ops in row["batches"]:
            assert sorted(ops) == [["recv", left], ["send", right]]  # a send paired with its receive
