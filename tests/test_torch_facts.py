"""Facts about torch's (and Python's) own code that the notebooks state with a citation: a signature, a line of
source, a header's list, a build's capability. They are checked here, on every stack the unit suite runs on
(torch 2.13.0 to the newest release), rather than in a notebook: source text changes between releases, and
a learner would skip such checks. Each test's docstring names the notebook section that states the fact;
the notebooks show the behaviour itself where a CPU run can."""

import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import constants

SPAWN = importlib.import_module("torch.multiprocessing.spawn")  # the module; mp.spawn is the function
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")


def squeezed(source: str) -> str:
    """Source with comment marks dropped and whitespace runs made one space: sentences split over lines."""
    return " ".join(source.replace("#", " ").split())


# --- notebook 03 -------------------------------------------------------------------------------------------

def test_nb03_spawn_signature_and_daemon_rules():
    """03 section 1, "`mp.spawn` calls `fn(index, *args)`": spawn's parameters and defaults
    (`torch.multiprocessing.spawn.spawn`), and multiprocessing's daemon rules (`BaseProcess.start`: a daemonic
    process may not start children; `multiprocessing.util._exit_function`: daemonic children are terminated
    when the parent exits)."""
    params = inspect.signature(mp.spawn).parameters
    assert list(params) == ["fn", "args", "nprocs", "join", "daemon", "start_method"]
    assert {name: p.default for name, p in params.items() if name != "fn"} == {
        "args": (), "nprocs": 1, "join": True, "daemon": False, "start_method": "spawn"}
    daemon_rule = inspect.getsource(importlib.import_module("multiprocessing.process").BaseProcess.start)
    assert "daemonic processes are not allowed to have children" in daemon_rule
    exit_hook = inspect.getsource(importlib.import_module("multiprocessing.util")._exit_function)
    assert "calling terminate() for daemon" in exit_hook


def test_nb03_wrap_forwards_the_traceback_through_a_file():
    """03 section 2, "Inside `mp.spawn`: `_wrap`", and its common mistake: `_wrap(fn, i, args, error_file)` sets
    the parent-death signal, calls `fn(i, *args)`, catches KeyboardInterrupt, pickles the traceback into
    `error_file` and exits 1; no `error_queue` (`start_processes`' comment: the queue was prone to deadlocks)."""
    assert inspect.isfunction(mp.spawn) and inspect.ismodule(SPAWN)  # one name, two objects
    assert list(inspect.signature(SPAWN._wrap).parameters) == ["fn", "i", "args", "error_file"]
    wrap = inspect.getsource(SPAWN._wrap)
    for needle in ("_prctl_pr_set_pdeathsig(signal.SIGINT)", "fn(i, *args)", "except KeyboardInterrupt:",
                   "pickle.dump(traceback.format_exc(), fh)", "sys.exit(1)"):
        assert needle in wrap, needle
    assert "error_queue" not in wrap
    start = inspect.getsource(SPAWN.start_processes)
    assert "target=_wrap" in start
    assert "multiprocessing.Queue but that can be prone to deadlocks" in squeezed(start)
    join = inspect.getsource(SPAWN.ProcessContext.join)
    assert "process.terminate()" in join and "pickle.load" in join and "raise ProcessRaisedException" in join


def test_nb03_both_exceptions_of_spawn_derive_from_process_exception():
    """03 section 2: `ProcessRaisedException` and `ProcessExitedException` derive from `ProcessException`,
    defined in `torch.multiprocessing.spawn` and not exported by `torch.multiprocessing`."""
    assert issubclass(mp.ProcessRaisedException, SPAWN.ProcessException)
    assert issubclass(mp.ProcessExitedException, SPAWN.ProcessException)
    assert not hasattr(mp, "ProcessException")


def test_nb03_a_single_node_torchrun_without_an_endpoint_picks_a_free_port():
    """03 section 5, "Ports": `--standalone`, and a single-node torchrun given no `--master-port` and no
    `--rdzv-endpoint`, both run the rendezvous on localhost:0 (`torch.distributed.run.run`)."""
    run_source = inspect.getsource(importlib.import_module("torch.distributed.run").run)
    assert run_source.count('args.rdzv_endpoint = "localhost:0"') == 2


def test_nb03_launch_is_torchrun_underneath_with_use_env():
    """03 sections 6 and 8: `torch.distributed.launch` calls torchrun's own `run()`, adds only `--use-env`
    (its parser is torchrun's: it accepts `--nnodes` and `--max-restarts`), and its docstring still says
    LOCAL_RANK comes with `--use-env` only and names `--local-rank=<rank>` (since 2.0)."""
    import torch.distributed.launch as legacy_launch
    import torch.distributed.run as torchrun_module

    assert legacy_launch.run is torchrun_module.run
    assert ".. versionchanged:: 2.0.0" in legacy_launch.__doc__ and "--local-rank=<rank>" in legacy_launch.__doc__
    assert "This behavior is enabled when you launch the script with" in legacy_launch.__doc__
    parsed = legacy_launch.parse_args(["--nnodes=2", "--max-restarts=3", "--use-env", "a.py"])
    assert (parsed.nnodes, parsed.max_restarts, parsed.use_env) == ("2", 3, True)
    assert legacy_launch.parse_args(["--use_env", "a.py"]).use_env  # the old spelling too
    assert not legacy_launch.parse_args(["a.py"]).use_env


# --- notebooks 05, 07, 09: timeouts --------------------------------------------------------------------------

def test_nb05_default_process_group_timeouts():
    """05 section 9, "Common mistake: a collective inside `if rank == 0:`" (and 07 section 3, 09 section 3.2):
    the default process-group timeout is 30 minutes for gloo and the other non-NCCL backends, 10 minutes for
    NCCL (`torch/distributed/constants.py`: `default_pg_timeout`, `default_pg_nccl_timeout`, None without NCCL)."""
    assert constants.default_pg_timeout == timedelta(minutes=30)
    expected = timedelta(minutes=10) if dist.is_nccl_available() else None
    assert constants.default_pg_nccl_timeout == expected


def nccl_header() -> str:
    path = os.path.join(INCLUDE, "torch", "csrc", "distributed", "c10d", "ProcessGroupNCCL.hpp")
    with open(path) as f:
        return f.read()


def test_nb07_nccl_error_handling_modes_and_timeout():
    """07 section 3, "Early stopping that every rank agrees on" (its GPU callout): `ProcessGroupNCCL.hpp`
    declares `TearDown = 1` and `SkipCleanUp = 3`, 3 the default of TORCH_NCCL_ASYNC_ERROR_HANDLING, and
    `kProcessGroupNCCLDefaultTimeout` of 10 minutes."""
    header = nccl_header()
    assert "the default value (3 - SkipCleanUp)" in header and "SkipCleanUp = 3" in header
    assert "TearDown = 1" in header
    assert re.search(r"kProcessGroupNCCLDefaultTimeout =\s*std::chrono::milliseconds\(10 \* 60 \* 1000\)", header)


def test_nb07_torchrun_puts_error_handling_1_into_its_workers():
    """07 section 3: torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 in every worker's environment unless it is
    set already (`LocalElasticAgent._start_workers`); the notebook's workers record what they received."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    start = inspect.getsource(LocalElasticAgent._start_workers)
    assert re.search(r'"TORCH_NCCL_ASYNC_ERROR_HANDLING":\s*os\.getenv\(\s*"TORCH_NCCL_ASYNC_ERROR_HANDLING",\s*'
                     r'str\(1\)\s*\)', start)


# --- notebook 06 -------------------------------------------------------------------------------------------

def autocast_list(header: str, macro: str) -> set[str]:
    """The op names of one ``#define MACRO(_) _(op) _(op, overload) ...`` list of autocast_mode.h."""
    body = header.split(f"#define {macro}(_)", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"_\((\w+)", body))


def test_nb06_cuda_autocast_lists():
    """06 section 1, "autocast: a few ops in 16 bits, the rest in float32" (its GPU callout): CUDA's float32
    lists (`AT_FORALL_FP32`, `AT_FORALL_FP32_SET_OPT_DTYPE` in `ATen/autocast_mode.h`) hold softmax,
    log_softmax, sum, cumsum, exp, log, pow, layer_norm and group_norm; the lower-precision list
    (`AT_FORALL_LOWER_PRECISION_FP`) holds matmul, linear and conv1d."""
    with open(os.path.join(INCLUDE, "ATen", "autocast_mode.h")) as f:
        header = f.read()
    fp32 = autocast_list(header, "AT_FORALL_FP32") | autocast_list(header, "AT_FORALL_FP32_SET_OPT_DTYPE")
    assert {"softmax", "log_softmax", "sum", "cumsum", "exp", "log", "pow", "layer_norm", "group_norm"} <= fp32
    assert {"matmul", "linear", "conv1d"} <= autocast_list(header, "AT_FORALL_LOWER_PRECISION_FP")


def test_nb06_the_list_reader_reads_a_macro_and_no_more():
    header = "#define AT_FORALL_FP32(_) \\\n  _(acos) \\\n  _(pow, Tensor_Scalar)\n\n#define OTHER(_) _(exp)\n"
    assert autocast_list(header, "AT_FORALL_FP32") == {"acos", "pow"}


# --- notebook 09 -------------------------------------------------------------------------------------------

def test_nb09_scale_up_restarts_workers_and_a_stopped_agent_leaves_the_rendezvous_open():
    """09 section 6, "Scale-up: stated, not demonstrated": while healthy, the agent restarts its worker group
    when nodes wait (`SimpleElasticAgent._invoke_run`, `num_nodes_waiting()`); `_stop_workers` takes no
    `is_restart` flag; `LocalElasticAgent._shutdown` does not touch the rendezvous; `launch_agent` does not
    close it when the agent is stopped by a signal."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.launcher.api import launch_agent

    healthy = inspect.getsource(SimpleElasticAgent._invoke_run).split("WorkerState.HEALTHY:", 1)[1]
    assert "num_nodes_waiting()" in healthy and "_restart_workers" in healthy
    assert "rdzv_handler" not in inspect.getsource(LocalElasticAgent._shutdown)
    for agent in (SimpleElasticAgent, LocalElasticAgent):
        assert list(inspect.signature(agent._stop_workers).parameters) == ["self", "worker_group"]
    signal_branch = inspect.getsource(launch_agent).split("except SignalException:", 1)[1].split("except", 1)[0]
    assert "shutdown_rdzv = False" in signal_branch


# --- notebook 10 -------------------------------------------------------------------------------------------

BF16_HOOK = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
    model = DDP(torch.nn.Linear(2, 2))
    try:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        print("accepted")
    except Exception as err:
        print("refused", "NCCL 2.10+" in str(err))
    dist.destroy_process_group()
""")


def test_nb10_bf16_compress_hook_needs_cuda_and_nccl_2_10_or_xpu_and_xccl(tmp_path):
    """10 section 6, "Communication hooks": DDP accepts `bf16_compress_hook` only when torch was built with CUDA
    (or ROCm) and NCCL >= 2.10, or with XPU and XCCL on an XPU (`DistributedDataParallel._check_comm_hook`);
    the refusal names NCCL 2.10+."""
    cuda_and_nccl = ((torch.version.cuda is not None or torch.version.hip is not None)
                     and dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10))
    xpu_and_xccl = dist.is_xccl_available() and torch.xpu.is_available()
    run = subprocess.run([sys.executable, "-c", BF16_HOOK], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "STORE": str(tmp_path / "store"), "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == (["accepted"] if cuda_and_nccl or xpu_and_xccl else ["refused", "True"])

