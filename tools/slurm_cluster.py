"""A two-node Slurm cluster on this one machine, for `make test-slurm` (tests/slurm/test_slurm.py).

Each of the two nodes, node1 and node2, is a set of Linux namespaces of its own: a network (with
only its loopback and one end of a veth pair joining it to the other node), a host name, and a
mount table in which /etc/hosts names both nodes. The veth pair is created inside node1's
namespace and its second end moved into node2's, so no interface or address is ever added to the
machine's own network; every daemon binds only to its node's address
(CommunicationParameters=NoCtldInAddrAny,NoInAddrAny). slurmctld and a slurmd run on node1, a
slurmd on node2; munged, for Slurm's authentication, listens on a socket file of the cluster's
private directory, not on the network. Daemons run in the foreground, so the process this module
starts is the daemon and its pid is known at once.

Nothing is left behind on any path (Cluster.close, also on an exception or Ctrl-C): jobs are
cancelled, the daemons stopped by pid (SIGTERM, then SIGKILL after a bounded wait), any process
still inside the nodes' network namespaces killed (a job step's processes), then the processes that
hold the namespaces, which removes the namespaces, the veth pair and the /etc/hosts bind mounts
(they exist only in the nodes' own mount tables), and the private directory.

`python tools/slurm_cluster.py` starts the cluster, prints `sinfo`, and stops it.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NODES = {"node1": "10.224.0.1", "node2": "10.224.0.2"}  # addresses that exist only in the namespaces
NODE_CPUS = 2
PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged")
START_TIMEOUT_S = 30.0
STOP_WAIT_S = 5.0
POLL_S = 0.2
WAITING_REASONS = ("None", "Priority", "Resources")  # a pending job's reasons that pass by themselves

SLURM_CONF = """\
ClusterName=ddp
SlurmctldHost=node1({node1})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
NodeName=node1 NodeAddr={node1} NodeHostname=node1 CPUs={cpus} State=UNKNOWN
NodeName=node2 NodeAddr={node2} NodeHostname=node2 CPUs={cpus} State=UNKNOWN
PartitionName=ddp Nodes=node[1-2] Default=YES MaxTime=60 State=UP
"""


class Unavailable(RuntimeError):
    """This machine cannot run the cluster (not root, no apt-get): a reason to skip, not a failure."""


def ensure_installed() -> None:
    """Install slurm-wlm and munge with apt-get if a program is missing; Unavailable if that cannot be."""
    if os.geteuid() != 0:
        raise Unavailable("needs root (network namespaces, apt-get install slurm-wlm munge)")
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed")
    if all(shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") for p in PROGRAMS):
        return
    if shutil.which("apt-get") is None:
        raise Unavailable("slurm-wlm/munge are missing and apt-get is unavailable")
    # A package's post-install script must not start system-wide daemons: Debian's policy-rc.d
    # hook (exit 101 = "do not start"), put in place only for the install if the machine has none.
    policy = Path("/usr/sbin/policy-rc.d")
    added_policy = not policy.exists()
    if added_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    try:
        print("test-slurm: installing", " ".join(PACKAGES), "with apt-get", flush=True)
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=True)
    except subprocess.CalledProcessError as err:
        raise Unavailable(f"apt-get could not install {' '.join(PACKAGES)}: {err}") from err
    finally:
        if added_policy:
            policy.unlink()


def _wait_for(what: str, ready, timeout: float = START_TIMEOUT_S, poll: float = POLL_S):
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(poll)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _stop(procs: list[subprocess.Popen], wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM every process, wait up to wait_s for all, SIGKILL the rest and reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=wait_s)


class Cluster:
    """The two-node cluster; use as a context manager (`with Cluster() as cluster:`)."""

    def __init__(self):
        self.dir: Path | None = None
        self.holders: dict[str, subprocess.Popen] = {}   # node -> the process holding its namespaces
        self.daemons: list[subprocess.Popen] = []        # munged, slurmctld, slurmds
        self.netns: set[int] = set()
        self._closed = False
        self._previous_sigterm = None

    # --- start -------------------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        atexit.register(self.close)
        # SIGTERM (a CI runner's stop) unwinds like Ctrl-C, so that close() runs
        self._previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self.dir = d = Path(tempfile.mkdtemp(prefix="ddp-slurm-"))
        d.chmod(0o711)   # munged: its socket's directory searchable by all, writable only by root
        (d / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in NODES.items()))
        (d / "slurm.conf").write_text(SLURM_CONF.format(dir=d, cpus=NODE_CPUS, **NODES))
        for sub in ("state", *(f"spool-{n}" for n in NODES)):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._daemon("munged", ["munged", "--foreground", "--socket", str(d / "munge.socket"),
                                "--key-file", str(key), "--pid-file", str(d / "munged.pid"),
                                "--log-file", str(d / "munged.log"), "--seed-file", str(d / "munged.seed")])
        for name in NODES:
            self._node(name)
        _wait_for("the nodes' namespaces", lambda: all((d / f"{n}.ready").exists() for n in NODES))
        self.netns = {_netns_inode(p.pid) for p in self.holders.values()} - {None}
        one, two = NODES
        self.node_run(one, "ip", "link", "add", "veth1", "type", "veth", "peer", "name", "veth2")
        self.node_run(one, "ip", "link", "set", "veth2", "netns", str(self.holders[two].pid))
        for name, dev in ((one, "veth1"), (two, "veth2")):
            self.node_run(name, "ip", "addr", "add", f"{NODES[name]}/24", "dev", dev)
            self.node_run(name, "ip", "link", "set", dev, "up")
        _wait_for("munged", lambda: (d / "munge.socket").exists())
        self._daemon("slurmctld", self._enter(one) + ["slurmctld", "-D", "-i"])
        for name in NODES:
            self._daemon(f"slurmd {name}", self._enter(name) + ["slurmd", "-D", "-N", name])
        _wait_for("both nodes idle", lambda: self._nodes_idle())

    def _node(self, name: str) -> None:
        """A process that holds a new network, UTS (host name) and mount namespace for node `name`."""
        setup = (f"hostname {name} && mount --bind {self.dir}/hosts /etc/hosts && ip link set lo up"
                 f" && touch {self.dir}/{name}.ready && exec sleep infinity")
        self.holders[name] = subprocess.Popen(
            ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c", setup],
            stdin=subprocess.DEVNULL, start_new_session=True)

    def _enter(self, node: str) -> list[str]:
        """The command prefix that runs a program inside `node` (nsenter: `ip netns exec` would
        remount /sys, and slurmd then finds no cgroup file system)."""
        return ["nsenter", f"--target={self.holders[node].pid}", "--net", "--uts", "--mount", f"--wd={REPO}"]

    def _daemon(self, label: str, argv: list[str]) -> None:
        log = open(self.dir / f"{label.replace(' ', '-')}.out", "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=self.env(), start_new_session=True)
        log.close()
        self.daemons.append(proc)
        time.sleep(0.05)
        if proc.poll() is not None:
            raise RuntimeError(f"{label} exited at once:\n{self.logs()}")

    def _nodes_idle(self) -> bool:
        for proc in self.daemons:
            if proc.poll() is not None:
                raise RuntimeError(f"a daemon exited ({proc.args[-3:]}):\n{self.logs()}")
        out = self.run("scontrol", "show", "nodes", "-o", check=False).stdout
        states = re.findall(r"State=(\S+)", out)
        return len(states) == len(NODES) and all(s == "IDLE" for s in states)

    # --- use ---------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        """The environment of Slurm's commands: this cluster's config, no SLURM_* of the caller."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
        env["SLURM_CONF"] = str(self.dir / "slurm.conf")
        return {**env, **extra}

    def node_run(self, node: str, *argv: str, check: bool = True, env: dict | None = None,
                 timeout: float = 30.0) -> subprocess.CompletedProcess:
        result = subprocess.run(self._enter(node) + list(argv), capture_output=True, text=True,
                                env=env or self.env(), timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} on {node} failed ({result.returncode}): {result.stderr}")
        return result

    def run(self, *argv: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        """A Slurm client command (sbatch, scontrol, ...) on node1, as a user logged in there."""
        return self.node_run(next(iter(NODES)), *argv, check=check, env=env)

    def sbatch(self, args: list[str], **env: str) -> int:
        """Submit a job (sbatch --parsable ARGS, with env added to its environment); its id."""
        out = self.run("sbatch", "--parsable", *args, env=self.env(**env)).stdout
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """scontrol show job, as a dict (JobState, ExitCode, NodeList, BatchHost, ...)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job_ids: list[int], timeout: float = 60.0, poll: float = POLL_S):
        """Poll until every job has ended (sbatch --wait would look only every 10 s).
        Returns ({id: final job dict}, [the set of jobs RUNNING at each poll])."""
        running_seen = []
        deadline = time.monotonic() + timeout
        while True:
            jobs = {j: self.job(j) for j in job_ids}
            running_seen.append({j for j, info in jobs.items() if info["JobState"] == "RUNNING"})
            if all(info["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
                   for info in jobs.values()):
                return jobs, running_seen
            stuck = {j: i["Reason"] for j, i in jobs.items()
                     if i["JobState"] == "PENDING" and i.get("Reason") not in WAITING_REASONS}
            if stuck:   # a job that Slurm will never start (PartitionTimeLimit, PartitionConfig, ...)
                raise RuntimeError(f"jobs pending for good: {stuck}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs not done after {timeout:.0f} s: "
                                   f"{ {j: (i['JobState'], i.get('Reason')) for j, i in jobs.items()} }\n{self.logs()}")
            time.sleep(poll)

    def logs(self, lines: int = 15) -> str:
        """The last lines of every daemon's log, for error messages."""
        parts = []
        for log in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # --- stop --------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        controller_up = len(self.daemons) > 1 and self.daemons[1].poll() is None
        if controller_up and self.dir is not None:
            try:   # running jobs end through Slurm (their steps get SIGTERM, then SIGKILL after KillWait)
                self.run("scancel", "--full", "--state=RUNNING", check=False)
                self.run("scancel", "--state=PENDING", check=False)
                _wait_for("jobs to end", lambda: not self.run("squeue", "-h", check=False).stdout.strip(),
                          timeout=10)
            except (TimeoutError, subprocess.TimeoutExpired, RuntimeError, OSError):
                pass
        _stop(self.daemons[::-1])
        self._kill_namespace_processes()
        _stop(list(self.holders.values()))
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_namespace_processes(self) -> None:
        """SIGKILL any process left in the nodes' network namespaces (job steps whose daemon is gone),
        except the holders, which are stopped next; found by their namespace, not by their name."""
        if not self.netns:
            return
        holders = {p.pid for p in self.holders.values()}
        for _ in range(50):
            left = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in holders
                    and _netns_inode(int(p)) in self.netns]
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)


def main() -> int:
    try:
        ensure_installed()
    except Unavailable as why:
        print(f"test-slurm: skipped: {why}")
        return 0
    with Cluster() as cluster:
        print(cluster.run("sinfo").stdout, end="")
        print(json.dumps({n: cluster.node_run(n, "hostname").stdout.strip() for n in NODES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
