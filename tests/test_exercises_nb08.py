"""The checks of notebook 08: each accepts right answers in other forms and refuses wrong ones (a silent
script, a script without DistributedSampler, a launch without --max-restarts, files left by an older run,
copied values) with a hint that does not give the answer. ``RIGHT08`` and ``WRONG08`` have the shape of
tests/test_exercises_cases.py's RIGHT and WRONG.

Every launch is one ``torchrun`` would have returned in this kernel (ddp_helpers.launch._launch_for_tests: a
registered result with the script's path and content hash), of a learner's notebook folder's own
scripts/08_ex_ddp_digits.py (08.1) or of its copy of the template, runs/08_capstone/train_ddp.py (08.2: the
notebook's PROGRAM, which its solution launches, not a scripts/ file), each script variant in a folder of its own;
a case's check runs with that folder as the running notebook's (``_lesson``). So a LaunchResult typed by hand,
a copy of a real one, a launch of a script edited since and a launch of another folder's copy (the solution by
its absolute path) are refused as the learner's would be (ddp_helpers.exercises.provenance.current_launch).
Three real launches show the check on what a run really produced.

08.1 runs the learner's script under the doctor (ddp_helpers.doctor.run.examine, about 10 s); the doctor's
verdicts are real, but each distinct script is examined once per session (``examine_each_script_once``), not
once per case; the real launches' checks run the doctor themselves.

08.2 and 08.3 compare with what the lesson's own launches wrote (the uninterrupted run of section 2, the
preempted run's snapshot of section 4), read from the notebook's folder as in tests/test_exercises_runs.py:
here fake lesson folders (JPY_SESSION_NAME's parent) that also hold the notebook's runs/08_capstone/train_ddp.py.
A test reads the launch path of the notebook's own 08.2 solution cell (PROGRAM, as the notebook defines it) and
checks it is where these folders hold the copy and what check_08_2 accepts."""

from __future__ import annotations

import ast
import atexit
import copy
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import notebook_in, refused_text  # tests/ is on sys.path

import ddp_helpers.doctor.run as doctor_run
from ddp_helpers import exercises
from ddp_helpers.exercises import nb08
from ddp_helpers.launch import EXIT_ABORT_TEXT, LaunchResult, WorkerFailed, _launch_for_tests, torchrun
from ddp_helpers.series import NOTEBOOK_DIR, ROOT

TMP = Path(tempfile.mkdtemp(prefix="exercise_nb08_"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
LESSON_RUNS = "runs/08_capstone"  # the notebook's RUNS: its runs, and the copy of the template it launches
PROGRAM = f"{LESSON_RUNS}/train_ddp.py"  # the notebook's PROGRAM, relative to its folder


def notebook_cells() -> list[dict]:
    return json.loads((NOTEBOOK_DIR / "08_capstone_digits.ipynb").read_text())["cells"]


def solution(prefix: str) -> str:
    """The notebook's own %%writefile solution cell for ``prefix`` (its script, without the magic line)."""
    cell = next(c for c in notebook_cells() if "".join(c["source"]).startswith(f"%%writefile scripts/{prefix}"))
    return "".join(cell["source"]).split("\n", 1)[1]


def parsed(cell: dict) -> ast.Module:
    """A code cell's syntax tree (an empty one for a cell magic, such as %%writefile)."""
    try:
        return ast.parse("".join(cell["source"]))
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def notebook_value(expr: ast.expr, cells: list[dict]) -> object:
    """The value of ``expr`` (a path expression of the notebook's) given the names ``cells`` assign: each name
    it uses is evaluated from its last plain assignment in those cells (``RUNS = Path(...)``, ``PROGRAM =
    str(RUNS / ...)``), with Path and str and nothing else."""
    assigned = {}
    for cell in cells:
        for node in parsed(cell).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned[node.targets[0].id] = node.value

    def value(node: ast.expr) -> object:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {"Path", "str"}
        return eval(compile(ast.Expression(node), "notebook 08", "eval"),  # the series' own notebook
                    {"__builtins__": {}, "Path": Path, "str": str}, {name: value(assigned[name]) for name in names})

    return value(expr)


def solution_launch(name: str) -> str:
    """The script path (as the notebook's folder sees it) that the notebook's own solution cell launches in
    ``name = torchrun(<script>, ...)``, its names evaluated from the cells before it."""
    cells = [c for c in notebook_cells() if c["cell_type"] == "code"]
    for i, cell in enumerate(cells):
        if "solution" not in cell.get("metadata", {}).get("tags", []):
            continue
        for node in ast.walk(parsed(cell)):
            if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]
                    and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "torchrun"):
                return str(notebook_value(node.value.args[0], cells[:i + 1]))
    raise AssertionError(f"no solution cell of notebook 08 launches `{name} = torchrun(...)`")


def template_copies(cells: list[dict]) -> list[str]:
    """Where the notebook's cells copy templates/train_ddp.py (``shutil.copyfile(ROOT / "templates" /
    "train_ddp.py", <destination>)``), as the notebook's folder sees it."""
    found = []
    for cell in cells:
        for node in ast.walk(parsed(cell)):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "copyfile" and len(node.args) == 2
                    and ast.dump(node.args[0]) == ast.dump(ast.parse('ROOT / "templates" / "train_ddp.py"',
                                                                     mode="eval").body)):
                found.append(str(notebook_value(node.args[1], cells)))
    return found


def launch(script: Path, stdout: dict, *, flags: tuple[str, ...] = (), out: Path | None = None,
           nproc: int = 2) -> LaunchResult:
    """A launch of ``script`` that torchrun returned in this kernel (registered, with the script's current hash),
    its ranks having printed ``stdout``; ``flags``: torchrun's own (``--max-restarts=1``)."""
    return _launch_for_tests(script, nproc, stdout, args=["--out", str(out)] if out is not None else [],
                             torchrun_args=list(flags))


def typed(real: LaunchResult) -> LaunchResult:
    """The same launch typed by hand, its provenance typed in too: no launch behind it."""
    return LaunchResult(command=real.command, stdout=real.stdout, seconds=1.0, started=real.started,
                        script=real.script, sha256=real.sha256, nproc=real.nproc, nnodes=1, args=real.args,
                        launcher=real.launcher, ok=True)


def notebook_of(script: Path) -> Path:
    """The learner's notebook folder that holds ``script``: as scripts/<name> (08.1), or as the notebook's copy
    of the template, runs/08_capstone/train_ddp.py (08.2)."""
    where = Path(LESSON_RUNS) if script.parent.as_posix().endswith(f"/{LESSON_RUNS}") else Path("scripts")
    return script.parents[len(where.parts)]


def stale(script: Path, *args, **kwargs) -> LaunchResult:
    """A launch of ``script``, then the script edited (a comment appended): a run of an older version."""
    result = launch(script, *args, **kwargs)
    script.write_text(script.read_text() + "# edited after the launch\n")
    return result


def folder(name: str, files: dict, *, older_than: Path | None = None) -> Path:
    """A run folder holding ``files`` (JSON values, or tensors for .pt), optionally dated before a script."""
    path = TMP / name
    path.mkdir(parents=True, exist_ok=True)
    for file, value in files.items():
        if file.endswith(".pt"):
            torch.save(value, path / file)
        else:
            (path / file).write_text(json.dumps(value))
        if older_than is not None:
            t = older_than.stat().st_mtime - 60
            os.utime(path / file, (t, t))
    return path


# --- 08.1: the conversion, judged by what its ranks did under the doctor ---------------------------------
# The learner's launch is faked (its command names a real script, its output and result.json are written here);
# the check's own run of the script under the doctor is real, so each script is accepted or refused for what
# its ranks actually did.
SOLUTION = solution("08_ex_ddp_digits.py").rstrip("\n") + "\n"


def edited(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def script(name: str, text: str, script_name: str = "08_ex_ddp_digits.py", where: str = "scripts") -> Path:
    """``text`` as <where>/<script_name> (scripts/ by default) of a learner's notebook folder of its own,
    TMP/<name>."""
    path = TMP / name / where / script_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


INIT = 'dist.init_process_group("gloo")  # torchrun\'s environment gives the rank, the world size and the rendezvous\n'
CLEAN_EXIT_LINES = ("dist.barrier()  # every rank is done with the group before any rank frees it\n"
                    "del model  # DDP holds the group: drop it first\ndist.destroy_process_group()\n")


def with_helper(source: str) -> str:
    """The conversion written with the series' `with distributed() as ctx:` (its teardown ends the group)."""
    head, body = source.split(INIT)
    assert body.endswith(CLEAN_EXIT_LINES)
    body = body[:-len(CLEAN_EXIT_LINES)].replace("rank, world = dist.get_rank(), dist.get_world_size()\n",
                                                 "rank, world = ctx.rank, ctx.world_size\n")
    head = edited(head, ("import torch.distributed.nn  # noqa: F401  before init_process_group, or it holds the "
                         "group at exit (notebook 04)\n", ""),
                  ("from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n",
                   "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n\n"
                   "from ddp_helpers.runtime import distributed\n"))
    return head + "with distributed() as ctx:\n" + "".join(
        f"    {line}" if line.strip() else line for line in body.splitlines(keepends=True))


ACCUMULATED = edited(  # micro-batches of 16 per rank, 2 of them (the first under no_sync) per optimizer step
    SOLUTION, ("import argparse\n", "import argparse\nimport contextlib\n"),
    ("loader = DataLoader(train, batch_size=64 // world, sampler=sampler)",
     "MICRO = 2\nloader = DataLoader(train, batch_size=64 // world // MICRO, sampler=sampler)"),
    ("""    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""", """    for i, (xb, yb) in enumerate(loader):
        last = (i + 1) % MICRO == 0 or i + 1 == len(loader)
        with contextlib.nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(xb), yb) / MICRO
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
"""))
NO_CLEAN_EXIT = edited(SOLUTION, ("del model  # DDP holds the group: drop it first\n", ""))
ABORT_AT_EXIT = edited(  # right work, then SIGABRT on rank 0 once its interpreter shuts down (gloo's exit abort)
    SOLUTION, ("dist.destroy_process_group()\n", """dist.destroy_process_group()


class ExitAbort:
    def __del__(self, abort=os.abort):
        abort()


if rank == 0:
    at_exit = ExitAbort()  # freed when the interpreter clears the script's names, after the exit handlers
"""))
WRONG_SCRIPTS1 = {
    "doubled global batch": edited(SOLUTION, ("batch_size=64 // world,", "batch_size=64,")),
    "every rank writes result.json": edited(SOLUTION, ('if rank == 0:\n    print(f"test accuracy',
                                                       'if True:\n    print(f"test accuracy')),
    "no DDP wrap": edited(SOLUTION, ("model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))",
                                     "model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))"),
                          ("model.module(test.tensors[0])", "model(test.tensors[0])")),
    "the plain script": solution("08_plain_digits.py"),
}
CONVERTED = script("s1", SOLUTION)
QUALIFIED = script("s1b", SOLUTION.replace("model = DDP(", "model = torch.nn.parallel.DistributedDataParallel(")
                   .replace('print(f"rank {rank}: {len(sampler)} samples per epoch")',
                            'print(f"rank {rank} trains on {len(sampler)} samples per epoch")'))
HELPER = script("s1_helper", with_helper(SOLUTION))
ACCUMULATE = script("s1_accumulate", ACCUMULATED)
HELD = script("s1_held", NO_CLEAN_EXIT)
ABORTS = script("s1_aborts", ABORT_AT_EXIT)


def with_clean_exit(source: str) -> str:
    """``source`` ending its group as the walkthrough does (torch.distributed.nn imported before init; a barrier,
    then the DDP model dropped, before destroy_process_group()), where it does not yet."""
    if "\nimport torch.distributed.nn" not in source:
        source = source.replace("import torch.distributed as dist\n",
                                "import torch.distributed as dist\nimport torch.distributed.nn  # noqa: F401\n", 1)
    if "\ndel model" not in source:
        source = source.replace("\ndist.destroy_process_group()", "\ndist.barrier()\ndel model\ndist.destroy_process_group()")
    return source


NO_SAMPLER = script("s1c", with_clean_exit(SOLUTION).replace(
    "sampler = DistributedSampler(train, shuffle=True, seed=0)", "sampler = range(len(train))").replace(
    "    sampler.set_epoch(epoch)\n", ""))
WRONG1 = {label: script(f"s1_{i}", text) for i, (label, text) in enumerate(WRONG_SCRIPTS1.items())}
EDITED = script("s1_edited", SOLUTION)  # edited after its launch (a stale launch)
SOLUTION_ABS = NOTEBOOK_DIR / "scripts" / "08_ex_ddp_digits.py"  # the instructor's copy (tests/conftest.py writes it)
RESULT_OK = folder("ex1", {"result.json": {"test_accuracy": 0.95, "world_size": 2}})
RESULT_OLD = folder("ex1_old", {"result.json": {"test_accuracy": 0.95, "world_size": 2}}, older_than=CONVERTED)
RESULT_ONE = folder("ex1_one", {"result.json": {"test_accuracy": 0.95, "world_size": 1}})
RESULT_LOW = folder("ex1_low", {"result.json": {"test_accuracy": 0.5, "world_size": 2}})
HALVES = {0: ["rank 0: 700 samples per epoch", "epoch 0: loss 0.5", "test accuracy 0.95"],
          1: ["rank 1: 700 samples per epoch"]}
WHOLE = {0: ["rank 0: 1400 samples per epoch"], 1: ["rank 1: 1400 samples per epoch"]}
CLEAN_EXIT_NOTE = ("note (clean exit): end with the clean exit: `dist.barrier()`, `del model`, "
                   "`dist.destroy_process_group()`, with `import torch.distributed.nn` before `init_process_group`.")


def aborted(result: LaunchResult) -> WorkerFailed:
    """What torchrun raises when rank 0 dies of gloo's exit abort after the work: the learner passes it."""
    return WorkerFailed(0, -6, f"[rank0]: {EXIT_ABORT_TEXT}", result.command, result=result)


def case1(script: Path, stdout: dict, *, wrap=None, **kwargs) -> dict:
    """08.1's keywords for a launch of ``script`` (``wrap`` applied to the launch), checked from the notebook
    folder that holds it."""
    result = launch(script, stdout, **kwargs)
    return dict(converted=wrap(result) if wrap else result, _lesson=notebook_of(script))


# the notebook's folders: the lesson's runs, none yet, runs that differ, the killed run in the straight run's place;
# each holds the notebook's copy of the template where the notebook puts it, its PROGRAM: runs/08_capstone/train_ddp.py
LESSON, EMPTY, ODD, SELF = (TMP / name for name in ("lesson", "empty_lesson", "odd_lesson", "self_lesson"))
TEMPLATE = ROOT / "templates" / "train_ddp.py"


def template_copy(name: str) -> Path:
    """The template copied as the notebook does, to PROGRAM in the notebook folder TMP/<name>."""
    return script(name, TEMPLATE.read_text(), Path(PROGRAM).name, where=str(Path(PROGRAM).parent))


COPY, EMPTY_COPY, ODD_COPY, SELF_COPY = (template_copy(folder.name) for folder in (LESSON, EMPTY, ODD, SELF))
EDITED2 = template_copy("s2_edited")  # edited after its launch (a stale launch)
SCRIPTS_COPY = script(LESSON.name, TEMPLATE.read_text(), "train_ddp.py")  # beside PROGRAM: scripts/train_ddp.py

# --- 08.2: the killed run -----------------------------------------------------------------------------
CONFIG = {"epochs": 3, "global_batch": 64, "lr": 3e-3, "weight_decay": 1e-4, "clip": 1.0, "workers": 1, "seed": 0,
          "world_size": 2}
torch.manual_seed(0)
WEIGHTS = {"0.weight": torch.randn(4, 3), "0.bias": torch.randn(4)}
OTHER = {k: v + 1e-7 for k, v in WEIGHTS.items()}


def log(attempts):
    return [{"epoch": e, "attempt": a, "train_loss": 0.5, "lr": 1e-3} for e, a in enumerate(attempts)]


REFERENCE = folder(f"lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS,
                                                       "log.json": log([0, 0, 0])})
folder(f"odd_lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])})
IN_PLACE = folder(f"self_lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS,
                                                          "log.json": log([0, 0, 1])})
KILLED = folder("ex2", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])})
DIFFERENT = folder("ex2_diff", {"config.json": CONFIG, "final.pt": OTHER, "log.json": log([0, 0, 1])})
STALE = folder("ex2_stale", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])}, older_than=COPY)
OTHER_CUT = folder("ex2_cut", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 1, 1])})
HEAD = "; 2 processes x batch 32 = global batch 64, 1 loader workers per process"
RESTARTED = {0: ["attempt 0: new run" + HEAD, "epoch 0: train loss 0.5", "epoch 1: train loss 0.4",
                 "attempt 1: resumed at epoch 2 step 0" + HEAD, "epoch 2: train loss 0.3", "test: accuracy 0.9"],
             1: []}
UNKILLED = {0: ["attempt 0: new run" + HEAD, "epoch 0: x", "epoch 1: x", "epoch 2: x", "test: accuracy 0.9"], 1: []}
FINISHED = {0: ["attempt 0: resumed at epoch 3 step 0" + HEAD, "test: accuracy 0.9"], 1: []}
RESTARTS = ("--max-restarts=1",)


def case2(stdout: dict = RESTARTED, *, lesson: Path = LESSON, of: Path | None = None, out: Path = KILLED,
          flags: tuple[str, ...] = RESTARTS, wrap=None, equal: object = True, **more) -> dict:
    """08.2's keywords, checked from the notebook folder ``lesson``, for a launch of ``of`` (default: the
    notebook's copy of the template there, PROGRAM), ``wrap`` applied to the launch; ``more``: other keywords."""
    result = launch(of or lesson / PROGRAM, stdout, flags=flags, out=out)
    return dict(killed_again=wrap(result) if wrap else result, equal=equal, _lesson=lesson, **more)

# --- 08.3: the preempted snapshot -------------------------------------------------------------------
def snapshot(epoch, step, lr):
    """What the template's SIGTERM handler saves (the fields the exercise reads)."""
    return {"state": {"epoch": epoch, "step": step, "sums": [1.0, 2.0], "history": []},
            "optimizer": {"param_groups": [{"lr": lr}]}, "scheduler": {"_last_lr": [lr]}}


torch.save(snapshot(1, 11, 0.0021875), LESSON / LESSON_RUNS / "preempted_snapshot.pt")
torch.save(snapshot(2, 3, 0.0005), ODD / LESSON_RUNS / "preempted_snapshot.pt")
OWN_SNAPSHOT = TMP / "my_snapshot.pt"  # a snapshot of the learner's choosing
torch.save(snapshot(0, 1, 0.5), OWN_SNAPSHOT)

RIGHT08 = {
    "08.1": [case1(CONVERTED, HALVES, out=RESULT_OK),
             case1(QUALIFIED, {0: ["rank 0 trains on 700 samples per epoch"],
                               1: ["rank 1 trains on 700 samples per epoch"]}, out=RESULT_OK),
             case1(HELPER, HALVES, out=RESULT_OK),  # the series' distributed()
             case1(ACCUMULATE, HALVES, out=RESULT_OK)],  # 2 micro-batches of 16 per rank and step
    "08.2": [case2(),
             case2(flags=("--max-restarts", "3"), equal=torch.tensor(True)),
             case2(equal=np.bool_(True))],
    "08.3": [dict(next_epoch=1, next_step=11, next_lr=0.0021875),
             dict(next_epoch=np.int64(1), next_step=torch.tensor(11), next_lr=np.float64(0.0021875)),
             dict(next_epoch=1.0, next_step=torch.tensor(11, dtype=torch.int32), next_lr=torch.tensor(0.0021875,
                                                                                                      dtype=torch.float64)),
             dict(next_epoch=2, next_step=3, next_lr=0.0005, _lesson=ODD)],  # another lesson run: its own snapshot
}
WRONG08 = {
    "08.1": [("a silent rank", case1(CONVERTED, {0: HALVES[0], 1: []}, out=RESULT_OK)),
             ("no DistributedSampler", case1(NO_SAMPLER, WHOLE, out=RESULT_OK)),
             ("no DistributedSampler, printing the halves", case1(NO_SAMPLER, HALVES, out=RESULT_OK)),
             ("doubled global batch", case1(WRONG1["doubled global batch"], HALVES, out=RESULT_OK)),
             ("every rank writes result.json", case1(WRONG1["every rank writes result.json"], HALVES, out=RESULT_OK)),
             ("no DDP wrap", case1(WRONG1["no DDP wrap"], HALVES, out=RESULT_OK)),
             ("the plain script", case1(WRONG1["the plain script"], HALVES, out=RESULT_OK)),
             ("each rank printed everything", case1(CONVERTED, WHOLE, out=RESULT_OK)),
             ("a result.json left by an earlier run", case1(CONVERTED, HALVES, out=RESULT_OLD)),
             ("one process", case1(CONVERTED, {0: HALVES[0]}, out=RESULT_OK, nproc=1)),
             ("world size 1 recorded", case1(CONVERTED, HALVES, out=RESULT_ONE)),
             ("a low test accuracy", case1(CONVERTED, HALVES, out=RESULT_LOW)),
             ("no --out", case1(CONVERTED, HALVES)),
             ("a launch of another script", dict(converted=launch(COPY, HALVES, out=RESULT_OK),
                                                 _lesson=notebook_of(CONVERTED))),
             ("a launch that failed in its work", case1(CONVERTED, HALVES, out=RESULT_OK, wrap=lambda r: WorkerFailed(
                 1, 1, "ValueError: bad", "torchrun", result=r))),
             # not a launch of the learner's current script (ddp_helpers.exercises.provenance.current_launch)
             ("a LaunchResult typed by hand", case1(CONVERTED, HALVES, out=RESULT_OK, wrap=typed)),
             ("a copy of a real launch", case1(CONVERTED, HALVES, out=RESULT_OK, wrap=copy.copy)),
             ("an exit abort carrying a copied launch", case1(CONVERTED, HALVES, out=RESULT_OK,
                                                              wrap=lambda r: aborted(copy.copy(r)))),
             ("a stale launch: the script edited after it", dict(converted=stale(EDITED, HALVES, out=RESULT_OK),
                                                                  _lesson=notebook_of(EDITED))),
             ("the solution by its absolute path", dict(converted=launch(SOLUTION_ABS, HALVES, out=RESULT_OK),
                                                        _lesson=notebook_of(CONVERTED))),
             ("another learner folder's copy", dict(converted=launch(QUALIFIED, HALVES, out=RESULT_OK),
                                                    _lesson=notebook_of(CONVERTED)))],
    "08.2": [("copy-through: the learner's own run as the reference", case2(out=DIFFERENT, reference=DIFFERENT)),
             ("no uninterrupted run yet", case2(lesson=EMPTY)),
             ("launched into the uninterrupted run's folder", case2(lesson=SELF, out=IN_PLACE)),
             ("the lesson's straight run was restarted", case2(lesson=ODD)),
             ("no --max-restarts", case2(flags=())),
             ("nothing killed", case2(UNKILLED)),
             ("a finished run relaunched", case2(FINISHED)),
             ("files from an older run", case2(out=STALE)),
             ("a log of another cut", case2(out=OTHER_CUT)),
             ("weights differ", case2(out=DIFFERENT)),
             ("equal said False", case2(equal=False)),
             ("equal as a string", case2(equal="True")),
             # not a launch of the notebook's current runs/08_capstone/train_ddp.py (provenance.current_launch)
             ("a LaunchResult typed by hand", case2(wrap=typed)),
             ("a copy of a real launch", case2(wrap=copy.copy)),
             ("a stale launch: the script edited after it", dict(
                 killed_again=stale(EDITED2, RESTARTED, flags=RESTARTS, out=KILLED), equal=True,
                 _lesson=notebook_of(EDITED2))),
             ("the template by its absolute path", case2(of=TEMPLATE)),
             ("another folder's copy", case2(of=ODD_COPY)),
             ("a copy at scripts/train_ddp.py, not the notebook's PROGRAM", case2(of=SCRIPTS_COPY)),
             ("a launch of another script", case2(of=CONVERTED)),
             ("3 processes", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED, nproc=3),
                                  equal=True))],
    "08.3": [("copy-through: answers of a snapshot of the learner's choosing", dict(
                 next_epoch=0, next_step=1, next_lr=0.5, snapshot=OWN_SNAPSHOT)),
             ("answers of a snapshot of the learner's choosing", dict(next_epoch=0, next_step=1, next_lr=0.5)),
             ("no snapshot yet", dict(next_epoch=1, next_step=11, next_lr=0.0021875, _lesson=EMPTY)),
             ("another run's snapshot", dict(next_epoch=1, next_step=11, next_lr=0.0021875, _lesson=ODD)),
             ("the step in progress", dict(next_epoch=1, next_step=10, next_lr=0.0021875)),
             ("the epoch skipped", dict(next_epoch=2, next_step=0, next_lr=0.0021875)),
             ("a fresh schedule's LR", dict(next_epoch=1, next_step=11, next_lr=3e-3 / 25)),
             ("the LR as a list", dict(next_epoch=1, next_step=11, next_lr=[0.0021875]))],
}
# 08.1's and 08.2's launches that are not the learner's current script's, and what the refusal says
NOT_THE_SCRIPTS = {"a LaunchResult typed by hand": "returned in this kernel",
                   "a copy of a real launch": "returned in this kernel",
                   "an exit abort carrying a copied launch": "returned in this kernel",
                   "a stale launch: the script edited after it": "after launching it",
                   "the solution by its absolute path": "a copy in another folder",
                   "the template by its absolute path": "a copy in another folder",
                   "another learner folder's copy": "a copy in another folder",
                   "another folder's copy": "a copy in another folder",
                   "a copy at scripts/train_ddp.py, not the notebook's PROGRAM": "a copy in another folder",
                   "a launch of another script": "is a launch of",  # 08.1: of train_ddp.py; 08.2: of 08.1's
                   "3 processes": "ran 3 process(es)"}


# right answers whose run the doctor has advice about: the verdict, then the clean exit's note
NOTED = {"no del model": case1(HELD, HALVES, out=RESULT_OK),
         "an exit abort after the work, in the doctor's run": case1(ABORTS, HALVES, out=RESULT_OK),
         "the learner's launch ended in the exit abort": case1(CONVERTED, HALVES, out=RESULT_OK, wrap=aborted)}
# what each 08.1 refusal must say: what the ranks did (or why the launch is not the script's), not the answer
SAYS1 = {"a silent rank": "printed nothing",
         "no DistributedSampler": "ranks 0 and 1 iterated the same 1400 samples",
         "no DistributedSampler, printing the halves": "ranks 0 and 1 iterated the same 1400 samples",
         "doubled global batch": "global batches of 120 or 128 samples",
         "every rank writes result.json": "ranks 0 and 1 each wrote out/result.json",
         "no DDP wrap": "no DistributedDataParallel built",
         "the plain script": "without init_process_group",
         "each rank printed everything": "did not print how many samples its sampler gives it",
         "a result.json left by an earlier run": "older than the script",
         "one process": "ran 1 process",
         "world size 1 recorded": "world size of 2",
         "a low test accuracy": "below 85%",
         "no --out": "no result.json",
         "a launch of another script": "is a launch of train_ddp.py, not of scripts/08_ex_ddp_digits.py",
         "a launch that failed in its work": "exited with code 1",
         **{label: NOT_THE_SCRIPTS[label] for label, _ in WRONG08["08.1"] if label in NOT_THE_SCRIPTS
            and label != "a launch of another script"}}


@pytest.fixture(autouse=True)
def lesson(monkeypatch):
    """The running notebook is LESSON/notebook.ipynb: the lesson's runs are LESSON/runs/08_capstone/..."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(LESSON / "notebook.ipynb"))


# --- the doctor's run of a script, once per script ---------------------------------------------------------
# check_08_1 runs the learner's script under the doctor (about 10 s a call), and many cases run the same script:
# the first call for a script (its content, arguments and world size) runs the doctor for real, later calls get
# that run's report and records. check_08_1 imports examine inside the function, from ddp_helpers.doctor.run,
# so replacing the module's attribute reaches it.
REAL_EXAMINE = doctor_run.examine
EXAMINED: dict[tuple[str, tuple[str, ...], int], tuple] = {}
DOCTOR_RUNS: list[Path] = []  # the scripts examined for real, in order


def examine_once(script, args=(), nproc=doctor_run.DEFAULT_NPROC, **kwargs):
    key = (hashlib.sha256(Path(script).read_bytes()).hexdigest(), tuple(str(a) for a in args), nproc)
    if key not in EXAMINED:
        DOCTOR_RUNS.append(Path(script))
        EXAMINED[key] = REAL_EXAMINE(script, args=args, nproc=nproc, **kwargs)
    return EXAMINED[key]


@pytest.fixture
def real_doctor():
    """A test that asks for it runs the doctor for real on every call (the real launches' checks)."""


@pytest.fixture(autouse=True)
def examine_each_script_once(request, monkeypatch):
    if "real_doctor" not in request.fixturenames:
        monkeypatch.setattr(doctor_run, "examine", examine_once)


def test_the_doctor_runs_once_per_script(capsys):
    """Two cases of the same script: the second gets the first's run (check_08_1 sees the patched examine)."""
    for case in (RIGHT08["08.1"][0], NOTED["the learner's launch ended in the exit abort"]):
        run_case("08.1", case)
    assert sum(1 for path in DOCTOR_RUNS if path.read_text() == SOLUTION) == 1, DOCTOR_RUNS


def run_case(exid, kwargs):
    """Call the check; ``_lesson`` is the notebook's folder for this case."""
    kwargs = dict(kwargs)
    folder = kwargs.pop("_lesson", LESSON)
    with notebook_in(folder):
        return exercises.CHECKS[exid](**kwargs)


def test_every_check_of_08_has_its_cases():
    ids = [i for i in exercises.exercise_ids() if i.startswith("08.")]
    assert ids == ["08.1", "08.2", "08.3"] and set(RIGHT08) == set(WRONG08) == set(ids)
    for exid in ids:
        assert len(RIGHT08[exid]) >= 2 and len(WRONG08[exid]) >= 3, exid
    for exid in ("08.2", "08.3"):  # they read the lesson's runs: one case copies through, one has no run
        labels = [label for label, _ in WRONG08[exid]]
        assert any(label.startswith("copy-through") for label in labels), exid
        assert any(kwargs.get("_lesson") is EMPTY for _, kwargs in WRONG08[exid]), exid


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT08.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    run_case(exid, RIGHT08[exid][i])
    assert capsys.readouterr().out == f"✓ Exercise {exid}: correct\n"


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG08.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    refused_text(exid, lambda: run_case(exid, dict(WRONG08[exid])[label]))


@pytest.mark.parametrize(("exid", "label", "launch"), [
    ("08.2", "no uninterrupted run yet", "the uninterrupted launch of train_ddp.py (section 2)"),
    ("08.3", "no snapshot yet", "the preempted launch of train_ddp.py (section 4)")])
def test_a_missing_lesson_run_names_the_launch_to_run_first(exid, label, launch):
    with pytest.raises(exercises.CheckFailed) as info:
        run_case(exid, dict(WRONG08[exid])[label])
    assert "does not exist" in str(info.value) and f"run {launch} first" in str(info.value)


def test_the_lesson_runs_are_read_beside_the_notebook_not_in_the_working_directory(tmp_path, monkeypatch):
    """A snapshot at the same relative path under the working directory is not the lesson's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / LESSON_RUNS).mkdir(parents=True)
    torch.save(snapshot(0, 1, 0.5), tmp_path / LESSON_RUNS / "preempted_snapshot.pt")
    with pytest.raises(exercises.CheckFailed):
        run_case("08.3", dict(next_epoch=0, next_step=1, next_lr=0.5))
    run_case("08.3", dict(next_epoch=1, next_step=11, next_lr=0.0021875))


def test_every_08_1_refusal_says_what_it_shows():
    assert set(SAYS1) == {label for label, _ in WRONG08["08.1"]}
    assert len(RIGHT08["08.1"]) >= 4 and len(NOTED) >= 3


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e in ("08.1", "08.2") for label, _ in WRONG08[e]
                                             if label in NOT_THE_SCRIPTS])
def test_a_launch_that_is_not_of_the_current_script_is_refused_for_it(exid, label):
    """Typed, copied, stale, another folder's copy, another script, another world size: current_launch's hints."""
    assert sum(1 for e, cases in WRONG08.items() if e == exid for lb, _ in cases if lb in NOT_THE_SCRIPTS) >= 3
    text = refused_text(exid, lambda: run_case(exid, dict(WRONG08[exid])[label]))
    assert NOT_THE_SCRIPTS[label] in text, text
    if exid == "08.2":  # the hints name the notebook's copy, the path its solution launches
        assert "scripts/train_ddp.py" not in text.replace(str(SCRIPTS_COPY.resolve()), ""), text
        assert label == "3 processes" or PROGRAM in text, text


def test_the_notebooks_08_2_solution_launches_the_copy_the_check_expects(capsys):
    """The path the notebook's own 08.2 solution cell launches (PROGRAM, as the notebook defines it) is where
    the notebook copies the template, where these tests' folders hold it, and what check_08_2 accepts: the
    check and the notebook cannot disagree on it again (the check once expected scripts/train_ddp.py)."""
    launched = solution_launch("killed_again")
    code = [c for c in notebook_cells() if c["cell_type"] == "code"]
    assert launched == PROGRAM and not Path(launched).is_absolute()
    assert launched in template_copies(code)  # the launched file is the notebook's copy of the template
    assert COPY == LESSON / launched
    run_case("08.2", case2(of=LESSON / launched))
    assert capsys.readouterr().out == "✓ Exercise 08.2: correct\n"
    assert Path(launched) == nb08.RUNS / nb08.TEMPLATE_COPY  # the check names it once, as the notebook's RUNS


@pytest.mark.parametrize("label", list(SAYS1))
def test_08_1_refusals_say_what_the_ranks_did_without_the_answer(label):
    text = refused_text("08.1", lambda: run_case("08.1", dict(WRONG08["08.1"])[label]))
    assert SAYS1[label] in text, text
    hint = text.split("Hint:", 1)[1]
    assert "32" not in hint and "64 // " not in hint  # the per-rank batch is the learner's to work out


@pytest.mark.parametrize("label", list(NOTED))
def test_right_answers_with_the_doctors_advice_get_the_verdict_and_the_clean_exit_note(label, capsys):
    run_case("08.1", NOTED[label])
    assert capsys.readouterr().out == f"{CLEAN_EXIT_NOTE}\n✓ Exercise 08.1: correct\n"


def real_launch(tmp_path: Path, source: Path, epochs: int = 1) -> LaunchResult | WorkerFailed:
    """A real launch of ``source`` as scripts/08_ex_ddp_digits.py; gloo's exit abort after the work (rare, and
    what the check is told about) gives its WorkerFailed, which the learner passes as the answer."""
    (tmp_path / "scripts").mkdir()
    shutil.copyfile(source, tmp_path / "scripts" / "08_ex_ddp_digits.py")
    try:
        return torchrun("scripts/08_ex_ddp_digits.py", nproc=2, args=["--out", "runs/ex1", "--epochs", epochs],
                        env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120, live="quiet", summary=False)
    except WorkerFailed as err:
        if not err.exit_abort:
            raise
        return err


def test_a_real_launch_of_a_conversion_without_distributed_sampler_is_refused(tmp_path, monkeypatch, real_doctor):
    monkeypatch.chdir(tmp_path)
    converted = real_launch(tmp_path, NO_SAMPLER)
    ran = converted.result if isinstance(converted, WorkerFailed) else converted
    assert ran.stdout[1] == ["rank 1: 1400 samples per epoch"]  # each rank trained on everything
    with pytest.raises(exercises.CheckFailed) as info, notebook_in(tmp_path):
        exercises.check_08_1(converted=converted)
    assert "ranks 0 and 1 iterated the same 1400 samples" in str(info.value)
    assert "DistributedSampler" in str(info.value)


@pytest.mark.parametrize("source, note", [(CONVERTED, False), (HELD, True)])
def test_a_real_launch_of_a_right_conversion_is_accepted(tmp_path, monkeypatch, capsys, real_doctor, source, note):
    """The notebook's solution, and the same without `del model` (its group held at exit: the note, every time,
    whether or not gloo's abort came)."""
    monkeypatch.chdir(tmp_path)
    converted = real_launch(tmp_path, source, epochs=5)
    with notebook_in(tmp_path):
        exercises.check_08_1(converted=converted)
    noted = note or isinstance(converted, WorkerFailed)
    assert capsys.readouterr().out.endswith(f"{CLEAN_EXIT_NOTE}\n" * noted + "✓ Exercise 08.1: correct\n")
