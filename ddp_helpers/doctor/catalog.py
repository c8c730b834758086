"""Every finding the doctor can report: its level, how it is detected, why it matters, the fix, the section.

The table in ``ddp_helpers/doctor/__init__.py`` and in the README is this catalogue, row for row
(tests/test_doctor.py holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["error", "warning", "info"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Entry:
    level: Level
    detection: str  # "runtime", "static" or "runtime + static": what the doctor needs to see it
    why: str
    fix: str
    section: str


def _nb(number: str, title: str) -> str:
    return f"notebook {number}, {title}"


CATALOG: dict[str, Entry] = {
    "data-not-sharded": Entry(
        "error", "runtime",
        "every rank trains on the same samples: N ranks do the work of one, and the global batch is N copies.",
        "give the DataLoader `sampler=DistributedSampler(dataset)` (and no shuffle=True);\n"
        "an IterableDataset yields only every WORLD_SIZE-th item, starting at RANK.",
        _nb("02", "2. The arithmetic of `DistributedSampler`")),
    "sampler-epoch-not-set": Entry(
        "warning", "runtime",
        "without set_epoch the DistributedSampler shuffles the same way every epoch: the model sees one order.",
        "call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader.",
        _nb("02", "3. `set_epoch`: one shared permutation per epoch")),
    "model-not-wrapped": Entry(
        "error", "runtime",
        "without DistributedDataParallel (or a hand all-reduce) no gradient is shared: each rank trains its own model.",
        "wrap the model after moving it to its device: `model = DDP(model, device_ids=...)`,\n"
        "and build the optimizer from `model.parameters()`.",
        _nb("04", "2. The basic DDP step")),
    "replicas-diverge": Entry(
        "error", "runtime",
        "the ranks end with different weights: the gradients were not averaged on every step.",
        "let every backward run through the DDP model (no_sync only on accumulation steps,\n"
        "never call model.module(...) for training), and give every rank the same optimizer settings.",
        _nb("04", "5. Replicas stay identical")),
    "save-on-every-rank": Entry(
        "warning", "runtime",
        "several ranks writing one file race: a reader can find it half-written, and the work is done N times.",
        "save on rank 0 only: `if dist.get_rank() == 0: torch.save(model.module.state_dict(), path)`,\n"
        "then `dist.barrier()` so no rank goes on before the file exists.",
        _nb("05", "1. The `module.` prefix and the rank-0-saves pattern")),
    "load-without-barrier": Entry(
        "error", "runtime",
        "a rank read a file another rank was writing with nothing in between: it finds it missing or half-written.",
        "put `dist.barrier()` between the save on rank 0 and the load on the other ranks.",
        _nb("05", "1. The `module.` prefix and the rank-0-saves pattern")),
    "unsafe-load": Entry(
        "warning", "runtime",
        "weights_only=False lets a checkpoint run any code while it loads; this file did not need it.",
        "load with `torch.load(path, map_location=device, weights_only=True)`.",
        _nb("05", "3. `weights_only=True`: loading must not run code")),
    "rank-conditional-collective": Entry(
        "error", "runtime + static",
        "a collective waits until every rank calls it; one that only some ranks reach hangs the others.",
        "call the collective on every rank, outside `if rank == 0:`;\n"
        "keep only the printing or saving inside the branch.",
        _nb("05", "9. Common mistake: a collective inside `if rank == 0:`")),
    "collective-mismatch": Entry(
        "error", "runtime",
        "the ranks called different collectives (or different shapes) at the same point: a hang, an error or wrong data.",
        "make every rank call the same collectives in the same order with the same shapes;\n"
        "`TORCH_DISTRIBUTED_DEBUG=DETAIL` names the first mismatch.",
        _nb("09", "3. Mismatched collectives and hangs")),
    "eval-duplicates": Entry(
        "error", "runtime",
        "samples evaluated on two ranks are counted twice when the results are summed: the metric is off.",
        "evaluate rank r on items r, r+world, ... (`Subset(ds, range(rank, len(ds), world))`),\n"
        "sum correct and count with all_reduce, then divide.",
        _nb("07", "2. Exact distributed evaluation")),
    "hardcoded-device": Entry(
        "warning", "static",
        "the global rank is a GPU index only on the first node; on the second node it names a GPU that is not there.",
        "use `local_rank = int(os.environ[\"LOCAL_RANK\"])` for the device:\n"
        "`torch.device(\"cuda\", local_rank)`, `device_ids=[local_rank]`.",
        _nb("09", "1. Two \"nodes\" on one machine")),
    "unreduced-metric": Entry(
        "warning", "runtime + static",
        "rank 0 printed its own shard's figure as if it were the global one.",
        "all-reduce the metric first: `dist.all_reduce(t, op=dist.ReduceOp.AVG)` for a mean,\n"
        "or all-reduce sums and counts and divide; then print on rank 0.",
        _nb("07", "2. Exact distributed evaluation")),
    "unused-parameters": Entry(
        "error", "runtime",
        "DDP waits for a gradient of every parameter; parameters that took no part in the loss never send one.",
        "remove the unused parameters from the model, or wrap with\n"
        "`DDP(model, find_unused_parameters=True)` when some steps skip them on purpose.",
        _nb("04", "7.2 `find_unused_parameters` and `static_graph`")),
    "no-destroy": Entry(
        "warning", "runtime",
        "a script that ends with the process group open leaves its shutdown to chance (warnings, aborts, hangs).",
        "end with `dist.barrier()`, drop the DDP model (`del model`), then `dist.destroy_process_group()`.",
        _nb("04", "1. The process group: backend, device, and how a script ends it")),
    "gloo-exit-abort": Entry(
        "warning", "runtime",
        "something held the group when the rank ended (a DDP model alive at destroy_process_group, or "
        "torch.distributed.nn imported after init): gloo can abort the rank at exit, after its work is done "
        "(exit code -6, pytorch/pytorch#190489), and the launch then fails.",
        "end with the clean exit: `dist.barrier()`, `del model`, `dist.destroy_process_group()`,\n"
        "with `import torch.distributed.nn` before `init_process_group`.",
        _nb("09", "7. Exit code -6 after the work is done: gloo's exit abort")),
    "no-process-group": Entry(
        "error", "runtime",
        "the script never called init_process_group: each process ran alone.",
        "call `dist.init_process_group()` at the start (torchrun sets RANK, WORLD_SIZE and the address).",
        _nb("04", "1. The process group: backend, device, and how a script ends it")),
    "hang": Entry(
        "error", "runtime",
        "the ranks did not finish within the timeout: a collective some rank never reached, or work too long.",
        "see where each rank waited (above); make every rank reach the same collectives,\n"
        "or give a longer --timeout.",
        _nb("09", "3. Mismatched collectives and hangs")),
    "script-failed": Entry(
        "error", "runtime",
        "the script stopped with an error after the process group started.",
        "read the error and the line above; run it once at 2 ranks with\n"
        "`torchrun --standalone --nproc-per-node=2 SCRIPT` to see the full traceback.",
        _nb("09", "8. A checklist of common failures")),
}
