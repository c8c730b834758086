"""A learner's plain worker restarted by torchrun, with and without torch's store switch.

This file is both a worker script and the function that launches it. The worker uses
nothing of this package: ``init_process_group("gloo")`` from torchrun's environment,
one all_reduce, and on the first attempt rank 1 SIGKILLs itself, so torchrun
(``--max-restarts=1``) starts the group again.

Why the restart can fail (pytorch/pytorch#135712): by default every rank is a client
of the torchrun agent's own TCPStore (``TORCHELASTIC_USE_AGENT_STORE=True``) and that
store lives across restarts, so the second attempt finds the first attempt's keys,
among them the gloo addresses of the dead processes. A rank that reads its peer's
old address before the peer has written the new one fails with "Gloo connectFullMesh
failed ... Connection refused" (or waits until the timeout). It is a race: measured on
2 busy cores, 7 of 10 restarts went wrong (6 refused, 1 hung past 60 s), and delaying
one rank of the second attempt by 2 s did not make it certain (2 of 4 failed).

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (see ``ddp_helpers.launch``) gives every attempt
a fresh store hosted by its rank 0, and the restart succeeds.

    from restart_demo import run_restarts  # tests/restart_demo.py (pytest puts tests/ on sys.path)
    run_restarts(10, share_store=True)    # the bug: counts of successes, failures, hangs
    run_restarts(10, share_store=False)   # torch's switch: 10 successes
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
from pathlib import Path

WORKER = Path(__file__).resolve()
SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def run_restarts(n: int = 10, *, share_store: bool, timeout: float = 60,
                 pg_timeout: float = 10) -> dict:
    """Launch the plain worker ``n`` times with ``--max-restarts=1``, one after another.

    share_store  True: the agent's store is shared with the workers (torch's default,
                 switch "0"); False: a fresh store per attempt (switch "1")
    timeout      seconds per launch before it counts as a hang
    pg_timeout   the workers' init_process_group timeout: how long gloo keeps trying
                 to connect to a stale address before it fails (torch's default: 30 min)

    Returns {"succeeded": int, "failed": int, "hung": int, "errors": [last line, ...]}.
    """
    from ddp_helpers.launch import LaunchTimeout, WorkerFailed, torchrun

    counts: dict = {"succeeded": 0, "failed": 0, "hung": 0, "errors": []}
    env = {SWITCH: "0" if share_store else "1"}
    args = ["--pg-timeout", str(pg_timeout)]
    for _ in range(n):
        try:
            result = torchrun(WORKER, nproc=2, args=args, env=env, torchrun_args=["--max-restarts=1"],
                              timeout=timeout, live="quiet", summary=False)
        except WorkerFailed as exc:
            counts["failed"] += 1
            counts["errors"].append((exc.traceback_tail.strip().splitlines() or [""])[-1])
        except LaunchTimeout:
            counts["hung"] += 1
        else:
            ok = all(result.stdout.get(r, [""])[-1] == "attempt=1 sum=3" for r in (0, 1))
            counts["succeeded" if ok else "failed"] += 1
    return counts


def main() -> None:
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--pg-timeout", type=float, default=10.0)
    options = parser.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=options.pg_timeout))
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    if attempt == 0 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash: no clean-up, no exit code of its own
    dist.barrier()
    print(f"attempt={attempt} sum={total.item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
