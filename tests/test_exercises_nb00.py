"""Check 00.4, the learner's first DDP conversion: accepted when the script's ranks did what DDP does (their own
shards at the plain script's global batch, equal replicas, one save by rank 0), whatever the style, and refused
with a hint otherwise. The learner's launch is a fake LaunchResult naming a real script (and the model.pt it
"wrote"); the check's own run of the script under the doctor is real, so each wrong script below is refused for
what its ranks actually did."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import torch
from exercise_calls import notebook_in, refused_text  # tests/ is on sys.path

from ddp_helpers import exercises
from ddp_helpers.exercises.nb00 import PLAIN_KEYS
from ddp_helpers.launch import EXIT_ABORT_TEXT, LaunchResult, WorkerFailed, _launch_for_tests
from ddp_helpers.series import NOTEBOOK_DIR

TMP = Path(tempfile.mkdtemp(prefix="exercise_nb00_"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
PLAIN = (NOTEBOOK_DIR / "walkthrough" / "exercise_plain.py").read_text()


def solution() -> str:
    """The notebook's own solution (its %%writefile cell, without the magic line)."""
    cells = json.loads((NOTEBOOK_DIR / "00_orientation.ipynb").read_text())["cells"]
    cell = next(c for c in cells if "".join(c["source"]).startswith("%%writefile scripts/00_ex_ddp.py"))
    return "".join(cell["source"]).split("\n", 1)[1]


def edited(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


SOLUTION = solution()
# the same conversion written with the series' runtime helper instead of init_process_group
WITH_HELPER = edited(
    SOLUTION,
    ("import torch.distributed.nn  # clean exit: imported before the group exists, it never holds it\n", ""),
    ("from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n",
     "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n\n"
     "from ddp_helpers.runtime import distributed\n"),
    ("""    local_rank = int(os.environ["LOCAL_RANK"])  # this process's index on this machine
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU per process
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before anything touches CUDA
    else:
        device = torch.device("cpu")
    dist.init_process_group()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by torchrun
""", """    with distributed() as ctx:
        train(ctx.device)


def train(device):
"""),
    ("""    dist.barrier()  # clean exit: every rank is done (its files written) before any rank ends the group
    del model  # nothing may hold the group when it is destroyed
    dist.destroy_process_group()
""", ""))
WRONG_SCRIPTS = {
    "the plain script, unchanged": PLAIN,
    "no DDP wrap": edited(SOLUTION, ("model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device))",
                                     "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)"),
                          ("torch.save(model.module.state_dict()", "torch.save(model.state_dict()")),
    "no DistributedSampler": edited(SOLUTION, ("loader = DataLoader(data, batch_size=GLOBAL_BATCH // world, sampler=sampler)",
                                               "loader = DataLoader(data, batch_size=GLOBAL_BATCH // world, shuffle=True)")),
    "the global batch doubled": edited(SOLUTION, ("batch_size=GLOBAL_BATCH // world,", "batch_size=GLOBAL_BATCH,")),
    "every rank saves": edited(SOLUTION, ("    if dist.get_rank() == 0:  # one writer", "    if True:  # every rank")),
    "no set_epoch": edited(SOLUTION, ("        sampler.set_epoch(epoch)\n", "")),
}


def conversion(name: str, text: str, *, keys=PLAIN_KEYS, stale: bool = False, typed: bool = False,
               script_name: str = "00_ex_ddp.py", saved: float | None = 2.0, wrap=None) -> dict:
    """A learner folder with scripts/<script_name> and the model.pt its (fake, registered) launch wrote; the check's
    keyword arguments, and ``_folder`` (the notebook's folder, where the check runs). ``stale``: the script
    was edited after its launch; ``typed``: the result is a LaunchResult typed by hand, not a launch's;
    ``saved``: when model.pt was written, in seconds after the launch began (None: not at all); ``wrap``: what
    the learner passes instead of the launch (the WorkerFailed that carries it)."""
    folder = TMP / name.replace(" ", "_").replace(",", "")
    (folder / "out").mkdir(parents=True, exist_ok=True)
    (folder / "scripts").mkdir(exist_ok=True)
    script = folder / "scripts" / script_name
    script.write_text(text)
    launched = time.time() + 1.0  # the launch began after the script was written
    if saved is not None:
        torch.save({k: torch.zeros(1) for k in keys}, folder / "out" / "model.pt")
        os.utime(folder / "out" / "model.pt", (launched + saved, launched + saved))
    stdout = {0: ["epoch 3: last batch loss 0.7"]}
    if typed:
        result = LaunchResult(command=f"torchrun --standalone --nproc-per-node=2 -- {script} {folder / 'out'}",
                              stdout=stdout, seconds=5.0, started=launched)
    else:
        result = _launch_for_tests(script, 2, stdout, args=[str(folder / "out")], started=launched, seconds=5.0)
    if stale:  # the script was edited after its launch
        script.write_text(text + "# edited after the launch\n")
    return dict(converted=wrap(result) if wrap else result, _folder=folder)


def exit_abort(result: LaunchResult) -> WorkerFailed:
    """What torchrun raises when rank 0 dies of gloo's exit abort after the work: the learner passes it."""
    return WorkerFailed(0, -6, f"[rank0]: {EXIT_ABORT_TEXT}", result.command, result=result)


def call_00_4(kwargs: dict) -> None:
    """The check, run from the case's notebook folder (its scripts/ is the learner's)."""
    kwargs = dict(kwargs)
    here = Path.cwd()
    os.chdir(kwargs.pop("_folder"))
    try:
        exercises.check_00_4(**kwargs)
    finally:
        os.chdir(here)


RIGHT00 = [conversion("solution", SOLUTION), conversion("with the runtime helper", WITH_HELPER)]
# a right conversion whose launch ended in gloo's exit abort after the work (the rule of 08.1): judged, then noted
ABORTED = conversion("exit abort after the work", SOLUTION, wrap=exit_abort)
CLEAN_EXIT_NOTE = ("note (clean exit): end with the clean exit: `dist.barrier()`, `del model`, "
                   "`dist.destroy_process_group()`, with `import torch.distributed.nn` before `init_process_group`.")
WRONG00 = {label: conversion(label, text) for label, text in WRONG_SCRIPTS.items()}
WRONG00.update({
    "the module. prefix in model.pt": conversion("prefix", SOLUTION, keys=[f"module.{k}" for k in PLAIN_KEYS]),
    "a stale run: the script changed after its launch": conversion("stale", SOLUTION, stale=True),
    "a launch of another script": conversion("other", SOLUTION, script_name="my_ddp.py"),
    "a hand-typed result": conversion("typed", SOLUTION, typed=True),
    "no model.pt": conversion("no model", SOLUTION, saved=None),
    "a model.pt left by an earlier run": conversion("old model", SOLUTION, saved=-60.0),
    "a launch that failed in its work": conversion("failed", SOLUTION, wrap=lambda r: WorkerFailed(
        1, 1, "ValueError: bad", r.command, result=r)),
})


@pytest.fixture(autouse=True)
def lesson():
    with notebook_in(TMP):
        yield


@pytest.mark.parametrize("i", range(len(RIGHT00)))
def test_right_conversions_in_either_style_pass(i, capsys):
    call_00_4(RIGHT00[i])
    assert capsys.readouterr().out == "✓ Exercise 00.4: correct\n"


# what each refusal must say: what the ranks did (or why the run is not the script's), not the answer
SAYS = {"the plain script, unchanged": "init_process_group", "no DDP wrap": "no DistributedDataParallel",
        "no DistributedSampler": "the same", "the global batch doubled": "global batches of 48 samples",
        "every rank saves": "each wrote", "no set_epoch": "same order", "the module. prefix in model.pt": "module.",
        "a stale run: the script changed after its launch": "after launching it",
        "a launch of another script": "is a launch of my_ddp.py",
        "a hand-typed result": "not a result that `torchrun(...)` returned",
        "no model.pt": "did not write model.pt", "a model.pt left by an earlier run": "did not write model.pt",
        "a launch that failed in its work": "exited with code 1"}


def test_every_wrong_case_says_what_it_shows():
    assert set(SAYS) == set(WRONG00) and len(RIGHT00) >= 2


def test_a_launch_that_ended_in_the_exit_abort_after_its_work_is_judged_and_noted(capsys):
    call_00_4(ABORTED)
    assert capsys.readouterr().out == f"{CLEAN_EXIT_NOTE}\n✓ Exercise 00.4: correct\n"


@pytest.mark.parametrize("label", list(WRONG00))
def test_wrong_conversions_fail_with_a_hint_that_says_what_the_ranks_did(label):
    text = refused_text("00.4", lambda: call_00_4(WRONG00[label]))
    assert SAYS[label] in text, text


def test_the_unit_tests_do_not_touch_a_script_the_notebook_wrote(tmp_path):
    """tests/conftest.py writes every notebook's worker scripts before the tests; a file already holding its
    text keeps its time, so a unit run beside a notebook's run does not make the notebook's launch look stale
    to its check (00.4 compares the script's time with the launch's)."""
    from ddp_helpers.series import worker_scripts, write_worker_scripts

    rel, text = next((r, t) for r, t in worker_scripts().items() if r.endswith("00_ex_ddp.py"))
    same, changed = tmp_path / rel, tmp_path / "scripts" / "00_hello.py"
    write_worker_scripts(tmp_path)
    os.utime(same, (1_000_000, 1_000_000))
    os.utime(changed, (1_000_000, 1_000_000))
    changed.write_text("# an older version\n")
    os.utime(changed, (1_000_000, 1_000_000))
    write_worker_scripts(tmp_path)
    assert same.stat().st_mtime == 1_000_000 and same.read_text() == text  # left alone
    assert changed.stat().st_mtime > 1_000_000 and changed.read_text() != "# an older version\n"  # rewritten
