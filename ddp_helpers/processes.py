"""Where a torchrun worker sits in the process tree, read from Linux's /proc.

    from ddp_helpers.processes import save_launch_record, load_launch_records

A worker calls :func:`save_launch_record` (its pid, its parent the agent, the agent's parent,
the rank variables and who listens on MASTER_PORT); the notebook reads every rank's record
with :func:`load_launch_records` and draws them (:func:`ddp_helpers.viz.diagrams.launch_tree`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _proc_stat_ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the parenthesised name


def _cmdline(pid: int) -> list[str]:
    try:
        return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets listening on ``port`` (Linux /proc/net/tcp and tcp6)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    return inodes


def _owns_socket(pid: int, inodes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def launch_record() -> dict:
    """What one worker of a torchrun launch knows about its place in the process tree.

    ``pid``/``ppid`` (the parent is torchrun's agent, which starts the workers), the
    agent's parent (``agent_ppid``: whoever ran torchrun) and command line, the rank
    variables torchrun sets, and ``store_owner``: which of {agent, this worker} holds the
    socket listening on MASTER_ADDR:MASTER_PORT (Linux /proc; ``None`` if neither or
    unknown). With ``TORCHELASTIC_USE_AGENT_STORE=True`` every worker only connects to the
    agent's TCPStore (``torch/distributed/rendezvous.py``, ``_create_c10d_store``);
    otherwise rank 0 hosts it.
    """
    env = os.environ
    agent = os.getppid()
    port = int(env.get("MASTER_PORT", "0") or 0)
    inodes = _listening_inodes(port) if port else set()
    owner = None
    if inodes:
        owner = "agent" if _owns_socket(agent, inodes) else "worker" if _owns_socket(os.getpid(), inodes) else None
    return {
        "rank": int(env.get("RANK", "0")), "local_rank": int(env.get("LOCAL_RANK", "0")),
        "world_size": int(env.get("WORLD_SIZE", "1")), "group_rank": int(env.get("GROUP_RANK", "0")),
        "pid": os.getpid(), "ppid": agent, "agent_pid": agent, "agent_ppid": _proc_stat_ppid(agent),
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
