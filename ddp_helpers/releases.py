"""The torch release a notebook runs on, and the one list of the private torch APIs the series uses.
The supported releases are requirements.txt's torch pins (tools/stack.py reads the range from them).

Compared notebook output must read the same on every supported release (notebooks/README.md, "Every
stack"); a claim that holds on some releases only branches on `torch_release()`. Each private API below
is resolved by `tests/test_releases.py` on every stack the unit suite runs on, so a release that moves
one fails there first, with the reason it is used beside it.
"""

from __future__ import annotations

import importlib
import re


def torch_release(version: str | None = None) -> tuple[int, int, int]:
    """(major, minor, patch) of torch.__version__ (or of `version`), without a build suffix or pre-release tag."""
    if version is None:
        import torch

        version = torch.__version__
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", str(version))
    if not found:
        raise ValueError(f"not a torch version: {version!r}")
    return tuple(int(part) for part in found.groups())


# dotted name -> why the series uses it and no public API serves
PRIVATE_TORCH_APIS = {
    "torch.utils._python_dispatch.TorchDispatchMode":
        "sharding.CommCounter counts every collective DTensor and FSDP issue and its payload bytes; the public "
        "torch.distributed.tensor.debug.CommDebugMode counts the calls only",
    "torch._ops.HigherOrderOperator":
        "sharding.CommCounter passes higher-order ops straight through (they hold no payload of their own)",
    "torch.serialization._package_registry":
        "checkpoint.pretend_saved_on records CPU tensors as saved on a GPU, to show map_location on a CPU "
        "machine; the public register_package adds an entry but cannot take it out again",
    "torch.distributed._compute_bucket_assignment_by_size":
        "exercise 04's check compares a learner's buckets with those DDP's own assignment function makes",
    "torch._dynamo.lookup_backend":
        "perf.compile_ddp's GraphCounter hands each graph it counts on to a backend named by a string",
    "torch._dynamo.utils.counters":
        "perf.compile_ddp reads torch.compile's graph and graph-break counts, which nothing public reports",
    "torch.distributed._functional_collectives.all_to_all_single":
        "experts.py and context_parallel.py need an all-to-all with uneven splits and autograd on gloo",
    "torch.distributed._functional_collectives.wait_tensor":
        "the same modules wait for that all-to-all's result",
    "torch.distributed._functional_collectives.AsyncCollectiveTensor":
        "notebook 12 shows the wrapper DTensor's redistribute returns before it is waited on",
    "torch.distributed.tensor._random":
        "notebook 12 seeds DTensor's RNG for a mesh (manual_seed, OffsetBasedRNGTracker), as sharded dropout needs",
    "torch.distributed.tensor.experimental._attention.context_parallel_unshard":
        "notebook 14 puts the load-balanced sequence back in order to compare it with one process",
    "torch.distributed.tensor.experimental._context_parallel._attention":
        "tests/test_torch_facts_cp.py reads what notebook 14 states of torch's ring attention, which runs on "
        "CUDA only: its table of kernels, its default options and how it rotates K, V and their gradients",
    "torch.distributed.tensor.experimental._context_parallel._load_balancer._HeadTailLoadBalancer":
        "tests/test_torch_facts_cp.py holds notebook 14's zigzag layout to the order torch's context_parallel "
        "gives the sequence by default",
    "torch.distributed.pipelining._backward.stage_backward_input":
        "notebook 13 splits the backward into its input and weight halves, as zero-bubble schedules do",
    "torch.distributed.pipelining._backward.stage_backward_weight":
        "notebook 13, the weight half of that split",
    "torch.utils.data.dataloader._BaseDataLoaderIter":
        "the doctor records the sample indices each rank's loader draws, by wrapping the iterator's "
        "_next_index and __next__; DataLoader has no hook for them",
    "torch.distributed.pipelining.stage._PipelineStageBase":
        "pipeline.StageTimer's type hint: the stage classes PipelineStage derives from it",
    "torch.nn.modules.batchnorm._BatchNorm":
        "syncbn.SyncBatchNorm derives from it, as torch's own nn.SyncBatchNorm does: the running statistics, "
        "checks and state_dict keys of every BatchNorm",
    "torch.multiprocessing.spawn._wrap":
        "notebook 03 prints the function every mp.spawn child runs (the parent-death signal, the error file); "
        "its section 2 reads it line by line, and nothing public shows it",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous._NodeDesc":
        "notebook 09 sorts two agents' node descriptors the way the c10d rendezvous assigns group ranks",
}


def resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module of {dotted!r} imports")
