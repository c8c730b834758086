"""What a worker script hands back to the notebook that launched it: rank 0's JSON results file.

A worker is launched with its output folder as its first argument (``torchrun(script, args=[RUNS / "x"])``)
and writes what the notebook asserts on into that folder:

    from ddp_helpers.results import output_dir, save_results

    out_dir = output_dir()                     # sys.argv[1], created if missing
    ...
    save_results(res, out_dir)                 # rank 0 writes out_dir/results.json; the others nothing
    save_results(res, out_dir, gather=True)    # every rank's res, in rank order, as one list

The notebook reads it back with ``load_results(RUNS / "x")``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

RESULTS = "results.json"


def output_dir(argv: list[str] | None = None) -> Path:
    """The folder named by the script's first argument, created if missing."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: give the output folder as the first argument (the notebook passes RUNS / name)")
    folder = Path(args[0])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def save_results(res: Any, folder: str | Path, name: str = RESULTS, gather: bool = False) -> Path | None:
    """Write ``res`` as JSON to ``folder/name`` on rank 0 and return the path (None on the other ranks).

    With ``gather=True`` every rank's ``res`` is gathered first (``all_gather_object``, a collective: call it
    on every rank) and rank 0 writes the list, rank 0's first. Without a process group the caller is rank 0.
    The file is written whole or not at all (a temporary file, then a rename), so a notebook never reads half.
    """
    if gather:
        everyone: list[Any] = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
        if dist.is_initialized():
            dist.all_gather_object(everyone, res)
        else:
            everyone[0] = res
        res = everyone
    if _rank() != 0:
        return None
    target = Path(folder) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(res, indent=1))
    partial.replace(target)
    return target


def load_results(folder: str | Path, name: str = RESULTS) -> Any:
    """What ``save_results`` wrote into ``folder``."""
    return json.loads((Path(folder) / name).read_text())
