"""A learner's conversion of a plain training script to DDP, judged by what its ranks did under the doctor.

The exercises that ask for a conversion (08.1 and 00.4) run the learner's script with
:func:`ddp_helpers.doctor.run.examine` and accept it when, whatever its style (``init_process_group`` or the
series' ``distributed()``, any per-rank batch arrangement):

- the run completed (gloo's exit abort after the work counts as completed: it becomes a note);
- in every epoch each rank trained on its own shard (disjoint, together every sample; a DistributedSampler's
  padding aside);
- every optimizer step saw the plain script's global batch (summed over the ranks, from the samples the
  training loader handed over between steps), the last step of an epoch its remainder;
- the replicas ended equal and the gradients were shared (the doctor's findings);
- rank 0 alone wrote the file the plain script saves.

:func:`refusal` returns the first thing that is not so, worded as what the ranks did, with a hint that names
what to change but not the answer; :func:`notes` the lines to print beside a verdict (the clean exit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddp_helpers.doctor.catalog import CATALOG
from ddp_helpers.doctor.checks import Evidence, _ranks
from ddp_helpers.doctor.records import Pass, RankRecord
from ddp_helpers.doctor.report import Report

# what the doctor may find that a conversion exercise asks about (the others are notes, or none of its business)
REFUSED = ("no-process-group", "data-not-sharded", "sampler-epoch-not-set", "model-not-wrapped", "replicas-diverge",
           "save-on-every-rank")
CLEAN_EXIT = ("no-destroy", "gloo-exit-abort")  # the same advice: one note for either or both


@dataclass(frozen=True)
class Plain:
    """What the plain script does, which its conversion keeps."""

    samples: int  # training samples per epoch
    global_batch: int  # samples per optimizer step
    epochs: int  # epochs of the doctor's run
    saved: str  # the name of the file the plain script writes (rank 0 alone, once converted)
    nproc: int = 2
    epochs_arg: str | None = "--epochs"  # the script's argument that sets its epochs (None: fixed in the script)

    def run_as(self) -> str:
        """How the doctor's run was made, for a message: "run with --epochs 2", or "run for its 4 epochs"."""
        return f"run with {self.epochs_arg} {self.epochs}" if self.epochs_arg else f"run for its {self.epochs} epochs"

    def steps(self) -> list[int]:
        """The global batch of each optimizer step of one epoch: each rank's shard (ceil(samples / nproc), a
        DistributedSampler pads to it) in per-rank batches of global_batch / nproc, the last one smaller."""
        shard, per_rank = math.ceil(self.samples / self.nproc), self.global_batch // self.nproc
        full, rest = divmod(shard, per_rank)
        return [per_rank * self.nproc] * full + ([rest * self.nproc] if rest else [])


@dataclass(frozen=True)
class Refusal:
    what: str  # what the ranks did
    hint: str  # what to change


def training_passes(record: RankRecord) -> list[Pass]:
    """The rank's passes over a DataLoader with gradients on and an optimizer step before its next pass."""
    passes = [p for p in record.passes() if p.grad and p.keys]
    starts = sorted(p.position for p in record.passes())
    steps = [i for i, e in enumerate(record.events) if e["ev"] == "step"]
    trained = []
    for p in passes:
        end = next((s for s in starts if s > p.position), len(record.events))
        if any(p.position < s < end for s in steps):
            trained.append(p)
    return trained


def step_samples(record: RankRecord) -> list[int]:
    """The training samples the rank's loaders handed over before each optimizer step, since the step before."""
    counts, before = [], 0
    for step in record.of("step"):
        now = int(step.get("samples", 0))
        counts.append(now - before)
        before = now
    return counts


def _sizes(values: list[int]) -> str:
    shown = sorted(set(values))
    return ", ".join(map(str, shown[:-1])) + f" or {shown[-1]}" if len(shown) > 1 else str(shown[0])


def refusal(report: Report, evidence: Evidence | None, plain: Plain, *, rerun: str) -> Refusal | None:
    """Why the doctor's run of the conversion is not the plain script on ``plain.nproc`` ranks, or None.
    ``rerun`` is the command that shows the learner the doctor's whole report."""
    if report.outcome != "completed" or evidence is None:
        errors = [f for f in report.findings if f.level == "error"]
        said = report.reason or (f"{errors[0].message} ({errors[0].id})" if errors else "")
        return Refusal(f"run again at {plain.nproc} ranks, the script did not complete ({report.outcome}"
                       f"{': ' + said if said else ''}).", f"run `{rerun}` in a terminal to see where it stops.")
    for finding in report.findings:
        if finding.id in REFUSED or finding.level == "error":
            return Refusal(f"{finding.message} ({finding.id}).", CATALOG[finding.id].fix.replace("\n", " "))
    records = [evidence.records.get(rank) for rank in range(plain.nproc)]
    if any(r is None for r in records):
        return Refusal(f"only ranks {sorted(evidence.records)} of {plain.nproc} recorded anything.",
                       f"run `{rerun}` in a terminal to see what the other ranks did.")
    return (_epochs(records, plain) or _shards(records, plain) or _global_batch(records, plain)
            or _writers(evidence, plain))


def _epochs(records: list[RankRecord], plain: Plain) -> Refusal | None:
    for record in records:
        passes = training_passes(record)
        if len(passes) != plain.epochs:
            keep = f"its {plain.epochs_arg} argument" if plain.epochs_arg else "its number of epochs"
            return Refusal(f"{plain.run_as()}, rank {record.rank} trained in {len(passes)} passes over its data "
                           "loader.",
                           f"keep the plain script's epoch loop and {keep}; change only what DDP needs.")
    return None


def _shards(records: list[RankRecord], plain: Plain) -> Refusal | None:
    padded = math.ceil(plain.samples / plain.nproc) * plain.nproc
    for epoch in range(plain.epochs):
        shards = [training_passes(r)[epoch].keys for r in records]
        together = {k for shard in shards for k in shard}
        overlap = sum(len(s) for s in shards) - len(together)
        if together != set(range(plain.samples)) or sum(len(s) for s in shards) > padded or \
                any(len(s) != len(set(s)) for s in shards):
            sizes = " and ".join(str(len(s)) for s in shards)
            return Refusal(f"in epoch {epoch} the ranks trained on {sizes} samples, {overlap} of them on more than "
                           f"one rank and {plain.samples - len(together & set(range(plain.samples)))} of the "
                           f"{plain.samples} on none.",
                           "give the DataLoader a DistributedSampler over the whole training set, and call its "
                           "set_epoch at the start of every epoch.")
    return None


def _global_batch(records: list[RankRecord], plain: Plain) -> Refusal | None:
    per_rank = [step_samples(r) for r in records]
    if len({len(c) for c in per_rank}) > 1:
        made = ", ".join(f"rank {r.rank} {len(c)}" for r, c in zip(records, per_rank, strict=True))
        return Refusal(f"the ranks made different numbers of optimizer steps ({made}).",
                       "let every rank run the same loop over its own shard, with the same per-rank batch.")
    expected = plain.steps() * plain.epochs
    steps = [sum(at) for at in zip(*per_rank, strict=True)]
    if steps == expected:
        return None
    if len(steps) != len(expected):
        return Refusal(f"{plain.run_as()}, the ranks made {len(steps)} optimizer steps with global "
                       f"batches of {_sizes(steps)} samples (summed over the ranks); the plain script makes "
                       f"{len(expected)} steps of {plain.global_batch} (the last of an epoch fewer).",
                       "make the per-rank batch the global batch divided by the number of ranks (or accumulate "
                       "micro-batches up to it before each step).")
    k = next(i for i, (a, b) in enumerate(zip(steps, expected, strict=True)) if a != b)
    each = " + ".join(str(c[k]) for c in per_rank)
    return Refusal(f"optimizer step {k + 1} saw a global batch of {steps[k]} samples ({each} on ranks "
                   f"{', '.join(str(r.rank) for r in records)}); the plain script's step {k + 1} sees "
                   f"{expected[k]}.",
                   "make the per-rank batch the global batch divided by the number of ranks (or accumulate "
                   "micro-batches up to it before each step).")


def _writers(evidence: Evidence, plain: Plain) -> Refusal | None:
    writers = sorted({rank for rank, record in evidence.records.items() for save in record.of("save")
                      if str(save.get("path", "")).endswith(plain.saved)})
    if writers == [0]:
        return None
    did = f"{plain.saved} was written by {_ranks(writers)}, not by rank 0 alone" if writers else \
        f"no rank wrote {plain.saved}"
    return Refusal(f"{did}.",
                   f"keep the plain script's writing of {plain.saved}, on rank 0 only (`if rank == 0:`).")


def shard_sizes(evidence: Evidence) -> dict[int, int]:
    """Each rank's samples in its first training pass (what its sampler gives it per epoch)."""
    sizes = {}
    for rank, record in evidence.records.items():
        passes = training_passes(record)
        if passes:
            sizes[rank] = len(passes[0].keys)
    return sizes


def notes(report: Report, ids: tuple[str, ...] = CLEAN_EXIT, *, aborted: bool = False) -> list[str]:
    """The lines an accepted conversion prints before its verdict: one per piece of advice among ``ids``'
    findings (no-destroy and gloo-exit-abort give the same one, the clean exit); ``aborted``: the learner's
    own launch ended in gloo's exit abort, which gives the clean exit's note too."""
    lines: list[str] = []
    if aborted:
        lines.append(f"note (clean exit): {CATALOG['gloo-exit-abort'].fix.replace(chr(10), ' ')}")
    for finding in report.findings:
        if finding.id not in ids:
            continue
        key, entry = ("clean exit", CATALOG["gloo-exit-abort"]) if finding.id in CLEAN_EXIT else \
            (finding.id, CATALOG[finding.id])
        line = f"note ({key}): {entry.fix.replace(chr(10), ' ')}"
        if line not in lines:
            lines.append(line)
    return lines
