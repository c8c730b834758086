"""The doctor: run your own DDP script at 2 ranks on CPU and get the classic mistakes, with line and fix.

    python -m ddp_helpers.doctor [--nproc N] [--timeout S] [--json FILE] my_train.py [ARGS...]

    from ddp_helpers.doctor import check
    report = check("my_train.py", args=["--epochs", "1"])   # prints the report, returns it

The script runs unchanged under torchrun (``CUDA_VISIBLE_DEVICES=`` and ``DDP_BACKEND=gloo``) in a fresh
empty working folder; a start-up hook records in every rank what it did (:mod:`.recorder`), and the
doctor reads the records and the script's syntax tree. Exit code: 0 without an error-level finding,
1 with one, 2 when the script could not be run (missing file, syntax error, an error before
``init_process_group``). The JSON format is in :mod:`ddp_helpers.doctor.report`. A hang ends at ``timeout``;
sooner when a collective waits: unless the script gives ``init_process_group`` a timeout of its own, the
doctor gives it ``timeout / 4`` (at least 5 s), so the waiting rank fails and says where it waited.

| id | level | detection | section |
|---|---|---|---|
| data-not-sharded | error | runtime | notebook 02, 2. The arithmetic of `DistributedSampler` |
| sampler-epoch-not-set | warning | runtime | notebook 02, 3. `set_epoch`: one shared permutation per epoch |
| model-not-wrapped | error | runtime | notebook 04, 2. The basic DDP step |
| replicas-diverge | error | runtime | notebook 04, 5. Replicas stay identical |
| save-on-every-rank | warning | runtime | notebook 05, 1. The `module.` prefix and the rank-0-saves pattern |
| load-without-barrier | error | runtime | notebook 05, 1. The `module.` prefix and the rank-0-saves pattern |
| unsafe-load | warning | runtime | notebook 05, 3. `weights_only=True`: loading must not run code |
| rank-conditional-collective | error | runtime + static | notebook 05, 9. Common mistake: a collective inside `if rank == 0:` |
| collective-mismatch | error | runtime | notebook 09, 3. Mismatched collectives and hangs |
| eval-duplicates | error | runtime | notebook 07, 2. Exact distributed evaluation |
| hardcoded-device | warning | static | notebook 09, 1. Two "nodes" on one machine |
| unreduced-metric | warning | runtime + static | notebook 07, 2. Exact distributed evaluation |
| unused-parameters | error | runtime | notebook 04, 7.2 `find_unused_parameters` and `static_graph` |
| no-destroy | warning | runtime | notebook 04, 1. The process group: backend, device, and how a script ends it |
| gloo-exit-abort | warning | runtime | notebook 09, 7. Exit code -6 after the work is done: gloo's exit abort |
| no-process-group | error | runtime | notebook 04, 1. The process group: backend, device, and how a script ends it |
| hang | error | runtime | notebook 09, 3. Mismatched collectives and hangs |
| script-failed | error | runtime | notebook 09, 8. A checklist of common failures |

"runtime" findings are measured in the run ("ranks 0 and 1 iterated the same 96 samples");
"static" ones are read from the script alone (``hardcoded-device``: on one node RANK equals
LOCAL_RANK, so no run can show it); "runtime + static" ones are measured, and the script's text
says where (the ``if`` on the rank) or what (the printed metric never went through a collective).
``gloo-exit-abort`` is read from what held the group when the ranks ended it (a live DDP model,
``torch.distributed.nn`` imported after init), so it is reported whether or not the abort came in this run;
an abort that came is told apart from the script's own failure by the recorder: the rank's exit handler
ran (it had finished its work) before it died with -6. Each rank's exit handler waits until every rank has
finished, so an abort on one rank cannot stop another in its work.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddp_helpers.doctor.report import Report


def check(script: str | os.PathLike, args: Sequence[str] = (), nproc: int = 2, timeout: float = 120.0) -> Report:
    """Run ``script`` under the doctor, print its report and return it (``report.ids``, ``.exit_code``)."""
    from ddp_helpers.doctor.run import diagnose

    report = diagnose(script, args=args, nproc=nproc, timeout=timeout)
    print(report.render())
    return report


__all__ = ["check"]
