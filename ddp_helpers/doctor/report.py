"""The doctor's report: findings, the exit code, the text a learner reads and the JSON a program reads.

JSON (stable; ``schema`` changes if a field changes meaning)::

    {"schema": 1, "script": "my_train.py", "nproc": 2,
     "outcome": "completed" | "crashed" | "timed-out" | "not-run",
     "reason": null | "why the script could not be run",
     "exit_code": 0 | 1 | 2,
     "counts": {"error": 1, "warning": 0, "info": 0},
     "findings": [{"id", "level", "file", "line", "message", "why", "fix", "section", "detection"}]}

Exit code: 2 when the script could not be run (``reason`` says why), else 1 with any error-level
finding, else 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ddp_helpers.doctor.catalog import CATALOG, LEVELS

Outcome = Literal["completed", "crashed", "timed-out", "not-run"]
SCHEMA = 1


@dataclass(frozen=True)
class Finding:
    id: str
    file: str
    line: int | None
    message: str  # what the doctor saw, measured

    def __post_init__(self) -> None:
        if self.id not in CATALOG:
            raise ValueError(f"unknown finding id {self.id!r}")

    @property
    def level(self) -> str:
        return CATALOG[self.id].level

    def as_dict(self) -> dict[str, Any]:
        entry = CATALOG[self.id]
        return {"id": self.id, "level": entry.level, "file": self.file, "line": self.line,
                "message": self.message, "why": entry.why, "fix": entry.fix, "section": entry.section,
                "detection": entry.detection}

    def render(self) -> str:
        entry = CATALOG[self.id]
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        fix = entry.fix.replace("\n", "\n       ")
        return (f"{entry.level.upper()} {self.id}  {where}\n  saw: {self.message}\n  why: {entry.why}\n"
                f"  fix: {fix}\n  see: {entry.section}")


@dataclass
class Report:
    script: str
    nproc: int
    outcome: Outcome
    findings: list[Finding] = field(default_factory=list)
    reason: str | None = None  # why the script could not be run (outcome "not-run")

    def __post_init__(self) -> None:
        self.findings = sorted(self.findings, key=lambda f: (LEVELS.index(f.level), f.line or 0, f.id))

    @property
    def exit_code(self) -> int:
        if self.outcome == "not-run":
            return 2
        return 1 if any(f.level == "error" for f in self.findings) else 0

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def counts(self) -> dict[str, int]:
        return {level: sum(f.level == level for f in self.findings) for level in LEVELS}

    def as_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "script": self.script, "nproc": self.nproc, "outcome": self.outcome,
                "reason": self.reason, "exit_code": self.exit_code, "counts": self.counts(),
                "findings": [f.as_dict() for f in self.findings]}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)

    def render(self) -> str:
        head = f"doctor: {self.script} at {self.nproc} ranks on CPU (gloo): {_OUTCOME_WORDS[self.outcome]}"
        if self.reason:
            head += f"\n  {self.reason}"
        counts = self.counts()
        tail = (f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info: "
                f"exit code {self.exit_code}")
        return "\n\n".join([head, *(f.render() for f in self.findings), tail])

    def __repr__(self) -> str:
        return f"Report({self.script!r}, outcome={self.outcome!r}, ids={self.ids}, exit_code={self.exit_code})"


_OUTCOME_WORDS = {"completed": "ran to the end", "crashed": "a rank stopped with an error",
                  "timed-out": "stopped at the timeout", "not-run": "could not be run"}


def from_dict(data: dict[str, Any]) -> Report:
    """A report read back from its JSON (``--json FILE``)."""
    findings = [Finding(f["id"], f["file"], f["line"], f["message"]) for f in data["findings"]]
    return Report(data["script"], data["nproc"], data["outcome"], findings, data.get("reason"))

