"""A worker that fails on one rank: rank FAIL_RANK exits with code FAIL_CODE before the process
group forms, while the other ranks wait for it in init_process_group (tests/slurm/test_slurm.py)."""
import os
import sys

if os.environ["RANK"] == os.environ["FAIL_RANK"]:
    print(f"rank {os.environ['RANK']} exits with code {os.environ['FAIL_CODE']}", flush=True)
    sys.exit(int(os.environ["FAIL_CODE"]))

import torch.distributed as dist  # noqa: E402 (the failing rank exits before the slow import)

from ddp_helpers.runtime import distributed  # noqa: E402

with distributed():
    dist.barrier()
