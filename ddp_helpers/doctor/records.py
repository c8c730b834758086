"""The ranks' event logs (written by :mod:`ddp_helpers.doctor.recorder`), read back as data."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]


@dataclass
class Collective:
    seq: int
    op: str
    line: int | None
    lines: list[int]
    shape: list[int] | None
    dtype: str | None
    reduce: str | None
    position: int  # index of its "enter" event in the rank's log
    done: bool = False
    values: list[float] | None = None

    def signature(self) -> tuple:
        return self.op, tuple(self.shape or ()), self.dtype, self.reduce

    def describe(self) -> str:
        tensor = f"{self.dtype}{self.shape}" if self.shape is not None else ""
        return f"{self.op}({tensor})"


@dataclass
class Pass:
    """One iteration over a DataLoader (an epoch, an evaluation)."""

    line: int | None
    occurrence: int  # how many passes this rank began at this line before it
    grad: bool
    facts: Event
    position: int
    keys: list[Any] = field(default_factory=list)  # sample indices, or fingerprints of an iterable's samples
    batches: list[int] = field(default_factory=list)  # the size of each batch, in order

    @property
    def key(self) -> tuple[int | None, int]:
        return self.line, self.occurrence


@dataclass
class RankRecord:
    rank: int
    events: list[Event]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["ev"] == kind]

    def first(self, kind: str) -> Event | None:
        return next((e for e in self.events if e["ev"] == kind), None)

    def last(self, kind: str) -> Event | None:
        found = self.of(kind)
        return found[-1] if found else None

    @property
    def finished(self) -> bool:
        """The script reached its end on this rank without an uncaught error (the recorder's exit handler ran)."""
        end = self.first("end")
        return end is not None and not end.get("crashed")

    def collectives(self) -> list[Collective]:
        calls: dict[int, Collective] = {}
        for position, e in enumerate(self.events):
            if e["ev"] == "enter" and not e.get("subgroup"):
                calls[e["seq"]] = Collective(e["seq"], e["op"], e.get("line"), e.get("lines", []), e.get("shape"),
                                             e.get("dtype"), e.get("reduce"), position)
            elif e["ev"] == "exit" and e["seq"] in calls:
                calls[e["seq"]].done, calls[e["seq"]].values = True, e.get("values")
        return [calls[k] for k in sorted(calls)]

    def passes(self) -> list[Pass]:
        found: dict[str, Pass] = {}
        seen_at: dict[int | None, int] = defaultdict(int)
        for position, e in enumerate(self.events):
            if e["ev"] == "pass":
                line = e.get("line")
                found[e["pass_id"]] = Pass(line, seen_at[line], e["grad"], e, position)
                seen_at[line] += 1
            elif e["ev"] == "keys" and e["pass_id"] in found:
                found[e["pass_id"]].keys.extend(e["keys"])
                found[e["pass_id"]].batches.append(len(e["keys"]))
        return list(found.values())


def read_records(folder: str | Path) -> dict[int, RankRecord]:
    """``{rank: RankRecord}`` of every rank that recorded; a line cut off by a kill is skipped."""
    records = {}
    for path in sorted(Path(folder).glob("rank*.jsonl")):
        events = []
        for text in path.read_text().splitlines():
            try:
                events.append(json.loads(text))
            except ValueError:
                continue
        records[int(path.stem[4:])] = RankRecord(int(path.stem[4:]), events)
    return records


def passes_by_key(records: dict[int, RankRecord]) -> dict[tuple[int | None, int], dict[int, Pass]]:
    """The DataLoader passes matched across ranks: the n-th pass begun at a line, on each rank."""
    matched: dict[tuple[int | None, int], dict[int, Pass]] = defaultdict(dict)
    for rank, record in records.items():
        for p in record.passes():
            matched[p.key][rank] = p
    return dict(matched)
