"""Where a torchrun worker sits in the process tree, read with psutil (on Linux from /proc, on macOS
from the system's own calls).

    from ddp_helpers.processes import save_launch_record, load_launch_records

A worker calls :func:`save_launch_record` (its pid, its parent the agent, the agent's parent,
the rank variables and who listens on MASTER_PORT); the notebook reads every rank's record
with :func:`load_launch_records` and draws them (:func:`ddp_helpers.viz.diagrams.launch_tree`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil


def _ppid(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (psutil: /proc on Linux, the
    system's own calls elsewhere; False when it may not be read)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def launch_record() -> dict:
    """What one worker of a torchrun launch knows about its place in the process tree.

    ``pid``/``ppid`` (the parent is torchrun's agent, which starts the workers), the
    agent's parent (``agent_ppid``: whoever ran torchrun) and command line, the rank
    variables torchrun sets, and ``store_owner``: which of {agent, this worker} holds the
    socket listening on MASTER_PORT (``None`` if neither or unknown). With
    ``TORCHELASTIC_USE_AGENT_STORE=True`` every worker only connects to the agent's TCPStore (``torch/distributed/rendezvous.py``, ``_create_c10d_store``);
    otherwise rank 0 hosts it.
    """
    env = os.environ
    agent = os.getppid()
    port = int(env.get("MASTER_PORT", "0") or 0)
    owner = None
    if port:
        owner = "agent" if _listens_on(agent, port) else "worker" if _listens_on(os.getpid(), port) else None
    return {
        "rank": int(env.get("RANK", "0")), "local_rank": int(env.get("LOCAL_RANK", "0")),
        "world_size": int(env.get("WORLD_SIZE", "1")), "group_rank": int(env.get("GROUP_RANK", "0")),
        "pid": os.getpid(), "ppid": agent, "agent_pid": agent, "agent_ppid": _ppid(agent),
        "agent_cmdline": _cmdline(agent)[:4],
        "master_addr": env.get("MASTER_ADDR"), "master_port": port or None,
        "use_agent_store": env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        "store_owner": owner,
    }


def save_launch_record(out_dir: str | os.PathLike) -> dict:
    """Write :func:`launch_record` to ``out_dir/rank{RANK}.json`` and return it."""
    record = launch_record()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{record['rank']}.json").write_text(json.dumps(record, indent=1))
    return record


def load_launch_records(out_dir: str | os.PathLike) -> list[dict]:
    """The records :func:`save_launch_record` wrote, in rank order: one per rank of one launch.

    Raises ValueError when the folder holds a different number of records than the world
    size (left over from an earlier launch with more ranks: clear the folder first).
    """
    records = sorted((json.loads(p.read_text()) for p in Path(out_dir).glob("rank*.json")),
                     key=lambda r: r["rank"])
    sizes = {r["world_size"] for r in records}
    if len(sizes) != 1 or [r["rank"] for r in records] != list(range(sizes.pop())):
        raise ValueError(f"{out_dir}: records of ranks {[r['rank'] for r in records]} do not form one launch")
    return records
