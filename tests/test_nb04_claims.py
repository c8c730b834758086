"""Claims of notebook 04 about torch and about the series' own code, checked here rather than in the
notebook (a learner would skip them): DDP's defaults in section 7's table, init_process_group's
arguments and the order of the runtime helper's set-up (section 1), and that no worker script indexes a
GPU by the global rank (section 1's common mistake)."""

import inspect
import json
import re
from pathlib import Path

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers import runtime, series

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NB04 = json.loads((NOTEBOOKS / "04_ddp_fundamentals.ipynb").read_text())


def markdown(needle):
    return next("".join(c["source"]) for c in NB04["cells"] if c["cell_type"] == "markdown" and needle in "".join(c["source"]))


def table_defaults(text):
    """{argument: default} from the rows ``| `name` | `default` | ...`` of a markdown table."""
    return {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)` \| `([^`]+)` \|", text, re.M)}


def test_section_7_table_states_ddps_defaults():
    table = table_defaults(markdown("## 7. DDP's arguments"))
    assert len(table) == 8
    params = inspect.signature(DDP).parameters
    assert {name: repr(params[name].default) for name in table} == table


def test_the_table_check_fails_on_a_wrong_default():
    wrong = table_defaults("| `static_graph` | `True` | ... |")
    assert repr(inspect.signature(DDP).parameters["static_graph"].default) != wrong["static_graph"]


def test_init_process_group_takes_the_arguments_section_1_names():
    assert {"backend", "init_method", "timeout", "device_id"} <= set(inspect.signature(dist.init_process_group).parameters)


def test_the_runtime_sets_the_device_before_init_process_group():
    source = [line.strip() for line in inspect.getsource(runtime.setup).splitlines()]
    order = [line for line in source
             if line.startswith(("backend, device_type =", "torch.cuda.set_device", "dist.init_process_group"))]
    positions = {key: next(i for i, line in enumerate(order) if key in line)
                 for key in ("choose_backend", "set_device", "init_process_group")}
    assert positions["choose_backend"] < positions["set_device"] < positions["init_process_group"]


GLOBAL_RANK_DEVICE = re.compile(r"device_ids=\[(ctx\.)?rank\]|\.to\((ctx\.)?rank\)|cuda:\{(ctx\.)?rank\}")


def test_no_worker_script_indexes_a_gpu_by_the_global_rank():
    scripts = dict(series.worker_scripts())
    scripts |= {p.name: p.read_text() for p in (NOTEBOOKS / "walkthrough").glob("step*.py")}
    assert len(scripts) > 30
    assert [name for name, text in scripts.items() if GLOBAL_RANK_DEVICE.search(text)] == []
    assert GLOBAL_RANK_DEVICE.search("model = DDP(model, device_ids=[rank])")   # the pattern it looks for
