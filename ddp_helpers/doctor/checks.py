"""The findings the ranks' records show: data, model, checkpoints, metrics, the script's ending.

Each check takes the :class:`Evidence` of one run and returns its findings; a check reports each
place (a loop, a file, a line) once. Collectives, hangs and failures are in
:mod:`ddp_helpers.doctor.collectives`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ddp_helpers.doctor.records import Collective, Pass, RankRecord, passes_by_key
from ddp_helpers.doctor.report import Finding
from ddp_helpers.doctor.static import Script

_SUM_LIKE = {"SUM", "AVG", None}  # reductions that count a duplicate twice (MAX/MIN flags do not)
_GATHERS = {"all_gather", "all_gather_into_tensor", "all_gather_object", "gather", "gather_object"}
_GRADIENT_SHARING = {"all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor"}
_PARAM_TOLERANCE = 1e-6  # relative; replicas under DDP agree to the last bit, diverged ones by far more


@dataclass
class Evidence:
    records: dict[int, RankRecord]
    script: Script
    file: str  # the script as the learner named it
    nproc: int
    run_dir: Path  # the run's working folder (relative paths are shown from here)

    def finding(self, id: str, line: int | None, message: str) -> Finding:
        return Finding(id, self.file, line, message)

    def shown(self, path: str | None) -> str:
        return os.path.relpath(path, self.run_dir) if path else "a file object"

    @property
    def initialised(self) -> bool:
        return any(r.first("init") for r in self.records.values())


def _ranks(ranks: list[int]) -> str:
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"


def data_not_sharded(ev: Evidence) -> list[Finding]:
    found: dict[int | None, Finding] = {}
    for (line, occurrence), by_rank in sorted(passes_by_key(ev.records).items(), key=lambda kv: str(kv[0])):
        first = by_rank[min(by_rank)]
        if not first.grad or line in found:
            continue
        for rank, other in sorted(by_rank.items())[1:]:
            common, smaller = _overlap(first, other)
            if smaller >= 2 and common * 2 >= smaller:
                found[line] = ev.finding("data-not-sharded", line, (
                    f"{_ranks([min(by_rank), rank])} iterated the same {common} samples in pass {occurrence + 1} "
                    f"of this loop ({len(first.keys)} and {len(other.keys)} samples each){_sampler_note(first)}"))
                break
    return list(found.values())


def _overlap(a: Pass, b: Pass) -> tuple[int, int]:
    mine, theirs = set(a.keys), set(b.keys)
    return len(mine & theirs), min(len(mine), len(theirs))


def _sampler_note(p: Pass) -> str:
    facts = p.facts
    if facts.get("sampler") == "DistributedSampler":
        return f"; its DistributedSampler was built with num_replicas={facts['replicas']}, rank={facts['sampler_rank']}"
    if facts.get("iterable"):
        return "; the IterableDataset yields the same items on every rank"
    return f"; the DataLoader draws with a {facts.get('sampler')}, not a DistributedSampler"


def sampler_epoch_not_set(ev: Evidence) -> list[Finding]:
    record = ev.records.get(min(ev.records)) if ev.records else None
    if record is None:
        return []
    by_line: dict[int | None, list[Pass]] = {}
    for p in record.passes():
        if p.facts.get("sampler") == "DistributedSampler" and p.facts.get("shuffle") and p.grad:
            by_line.setdefault(p.line, []).append(p)
    found = []
    for line, passes in by_line.items():
        for before, after in zip(passes, passes[1:], strict=False):
            if before.facts["epoch"] == after.facts["epoch"] and before.keys == after.keys and len(before.keys) > 1:
                found.append(ev.finding("sampler-epoch-not-set", line, (
                    f"rank {record.rank}'s DistributedSampler gave the same order of {len(before.keys)} samples in "
                    f"passes {before.occurrence + 1} and {after.occurrence + 1} of this loop "
                    f"(its epoch stayed {before.facts['epoch']})")))
                break
    return found


def model_not_wrapped(ev: Evidence) -> list[Finding]:
    if not ev.initialised or ev.nproc < 2:
        return []
    for rank, record in sorted(ev.records.items()):
        steps, params = record.of("step"), record.last("params") or {}
        if not steps or record.of("ddp") or params.get("sharded"):  # FSDP shards: a wrapper of its own
            continue
        shared = sum(c.op in _GRADIENT_SHARING for c in record.collectives())
        if shared < len(steps):
            return [ev.finding("model-not-wrapped", steps[0].get("line"), (
                f"rank {rank} ran {len(steps)} optimizer steps with no DistributedDataParallel built and "
                f"{shared} gradient all-reduces: no gradient was shared between the ranks"))]
    return []


def replicas_diverge(ev: Evidence) -> list[Finding]:
    final = {rank: r.last("params") for rank, r in sorted(ev.records.items()) if r.last("params")}
    if len(final) < 2:
        return []
    (first, ref), *others = final.items()
    if ref["sharded"]:
        return []
    for rank, params in others:
        differ = [abs(a - b) for a, b in zip(ref["sums"], params["sums"], strict=False)
                  if abs(a - b) > _PARAM_TOLERANCE * (1 + abs(a))]
        if differ or len(ref["sums"]) != len(params["sums"]):
            step = ev.records[first].last("step") or {}
            return [ev.finding("replicas-diverge", step.get("line"), (
                f"after {ref['steps']} optimizer steps the parameters of ranks {first} and {rank} differ "
                f"({len(differ)} of {len(ref['sums'])} tensors; largest difference of a tensor's sum "
                f"{max(differ, default=0.0):.3g})"))]
    return []


def save_on_every_rank(ev: Evidence) -> list[Finding]:
    writers: dict[str, dict[int, dict]] = {}
    for rank, record in sorted(ev.records.items()):
        for save in record.of("save"):
            if save.get("path"):
                writers.setdefault(save["path"], {}).setdefault(rank, save)
    return [ev.finding("save-on-every-rank", by_rank[min(by_rank)].get("line"),
                       f"{_ranks(sorted(by_rank))} each wrote {ev.shown(path)}")
            for path, by_rank in writers.items() if len(by_rank) > 1]


def load_without_barrier(ev: Evidence) -> list[Finding]:
    found: dict[str, Finding] = {}
    for rank, record in sorted(ev.records.items()):
        for position, load in enumerate(record.events):
            path = load.get("path")
            if load["ev"] != "load" or not path or path in found or _saved_before(record, path, position):
                continue
            message = _unsynchronised(ev, rank, load, record)
            if message:
                found[path] = ev.finding("load-without-barrier", load.get("line"), message)
    return list(found.values())


def _saved_before(record: RankRecord, path: str, position: int) -> bool:
    return any(e["ev"] == "save" and e.get("path") == path for e in record.events[:position])


def _unsynchronised(ev: Evidence, rank: int, load: dict, record: RankRecord) -> str | None:
    """Why the load of another rank's file was not ordered after its save by a collective, or None."""
    path = load["path"]
    failed = next((e["error"] for e in record.of("load_error") if e.get("path") == path), None)
    after = f", and it failed with {failed}" if failed else ""
    for other, theirs in sorted(ev.records.items()):
        save = next((e for e in theirs.of("save") if e.get("path") == path), None)
        if other != rank and save is not None and load["seq"] <= save["seq"]:
            return (f"rank {rank} loaded {ev.shown(path)} at line {load.get('line')}, written by rank {other} at "
                    f"line {save.get('line')}, with no collective between the save and the load{after}")
    if failed == "FileNotFoundError" and Path(path).exists():
        return (f"rank {rank} loaded {ev.shown(path)} at line {load.get('line')} before another rank wrote it: "
                f"the load failed with {failed}, yet the file existed when the run ended")
    return None


def unsafe_load(ev: Evidence) -> list[Finding]:
    found: dict[int | None, Finding] = {}
    for record in ev.records.values():
        for e in record.of("load_safe"):
            if e["safe"] and e.get("line") not in found:
                found[e.get("line")] = ev.finding("unsafe-load", e.get("line"), (
                    f"torch.load passed weights_only=False, yet {ev.shown(e['path'])} loads with weights_only=True"))
    return list(found.values())


def eval_duplicates(ev: Evidence) -> list[Finding]:
    found: dict[int | None, Finding] = {}
    for (line, _), by_rank in passes_by_key(ev.records).items():
        first_rank = min(by_rank)
        first = by_rank[first_rank]
        if first.grad or line in found:
            continue
        for rank, other in sorted(by_rank.items())[1:]:
            common, smaller = _overlap(first, other)
            padded = _pads(first)
            if common == 0 or not (padded or common * 2 >= smaller):
                continue
            summed = _next_sum(ev.records[first_rank], first.position)
            if summed is not None:
                found[line] = ev.finding("eval-duplicates", line, (
                    f"{_ranks([first_rank, rank])} both evaluated {common} sample(s) in this loop{padded}, then "
                    f"combined the results with {summed.describe()} at line {summed.line}: they count twice"))
                break
    return list(found.values())


def _pads(p: Pass) -> str:
    facts = p.facts
    if facts.get("sampler") == "DistributedSampler" and not facts.get("drop_last") and \
            facts.get("dataset_len") is not None and facts["total_size"] > facts["dataset_len"]:
        return f" (the DistributedSampler pads {facts['dataset_len']} samples to {facts['total_size']})"
    return ""


def _next_sum(record: RankRecord, position: int) -> Collective | None:
    """The first collective after a pass, if it adds the ranks' results up (a sum, a mean or a gather)."""
    later = [c for c in record.collectives() if c.position > position]
    if later and (later[0].op in _GATHERS or (later[0].op in ("all_reduce", "reduce") and later[0].reduce in _SUM_LIKE)):
        return later[0]
    return None


def unreduced_metric(ev: Evidence) -> list[Finding]:
    if len(ev.records) < 2 or not ev.initialised:
        return []
    first, *others = sorted(ev.records)
    if not all(ev.records[r].finished or ev.records[r].first("destroy") for r in others):
        return []
    printed_elsewhere = {e.get("line") for r in others for e in ev.records[r].of("print")}
    found: dict[int, Finding] = {}
    for e in ev.records[first].of("print"):
        line = e.get("line")
        if line is None or line in printed_elsewhere or line in found:
            continue
        metric = ev.script.unreduced_metric(line)
        if metric:
            found[line] = ev.finding("unreduced-metric", line, (
                f"rank {first} alone printed `{metric}` (\"{e['text'][:60]}\"), a value that went through no "
                "collective: it is rank 0's shard only"))
    return list(found.values())


_UNUSED_WORDS = ("find_unused_parameters", "did not receive grad", "were not used in producing loss")


def unused_parameters(ev: Evidence, failure_text: str) -> list[Finding]:
    for rank, record in sorted(ev.records.items()):
        for crash in record.of("crash"):
            if any(w in crash.get("message", "") for w in _UNUSED_WORDS):
                names = ", ".join(crash.get("unused") or []) or "some parameters"
                return [ev.finding("unused-parameters", crash.get("line"), (
                    f"rank {rank} stopped here in DDP's forward: {names} received no gradient in the step before"))]
    if any(w in failure_text for w in _UNUSED_WORDS):
        return [ev.finding("unused-parameters", None,
                           "a rank stopped with DDP's error about parameters that received no gradient")]
    return []


def no_destroy(ev: Evidence) -> list[Finding]:
    open_at_end = [rank for rank, r in sorted(ev.records.items()) if r.finished and r.first("end")["pg_alive"]]
    if not open_at_end:
        return []
    init = ev.records[open_at_end[0]].first("init") or {}
    return [ev.finding("no-destroy", init.get("line"), (
        f"{_ranks(open_at_end)} reached the end of the script with the process group still open "
        "(destroy_process_group was never called)"))]


def no_process_group(ev: Evidence) -> list[Finding]:
    if ev.initialised or not ev.records or not all(r.finished for r in ev.records.values()):
        return []
    return [ev.finding("no-process-group", None, (
        f"all {ev.nproc} processes ran to the end without init_process_group: each ran alone"))]


def hardcoded_device(ev: Evidence) -> list[Finding]:
    return [ev.finding("hardcoded-device", line, (
        f"`{code}` picks the device from the global rank (seen by reading the script: on one node RANK "
        "equals LOCAL_RANK, so a run cannot show it)")) for line, code in ev.script.global_rank_devices()]


def group_held_at_exit(ev: Evidence) -> list[Finding]:
    """The ranks that ended their work with the group still held: gloo's exit abort (notebook 09, 7) can kill
    them at interpreter exit, now and then. Read from what held it, so the finding does not depend on whether
    the abort came in this run (:func:`ddp_helpers.doctor.collectives.how_it_ended` reports one that came).
    A group left open is ``no-destroy``'s; the series' ``distributed()`` waits out the group's threads."""
    held: dict[int, tuple[dict, list[str]]] = {}
    for rank, record in sorted(ev.records.items()):
        destroy = record.first("destroy")
        if destroy is None or destroy.get("by_series") or not record.finished:
            continue
        holders = []
        if destroy.get("ddp_alive"):
            holders.append(f"{destroy['ddp_alive']} DDP model(s) still existed when destroy_process_group ran")
        if destroy.get("late_nn"):
            holders.append("torch.distributed.nn was first imported after init_process_group (by the first "
                           "optimizer or DDP model), so its functions' defaults hold the group")
        if holders:
            held[rank] = (destroy, holders)
    if not held:
        return []
    destroy, holders = held[min(held)]
    return [ev.finding("gloo-exit-abort", destroy.get("line"), (
        f"{_ranks(sorted(held))} ended the group while something still held it ({'; '.join(holders)}): gloo can "
        f"abort a rank at exit with code -6 after its work is done"))]
