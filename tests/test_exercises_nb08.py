"""The checks of notebook 08: each accepts right answers in other forms and refuses wrong ones (a silent
script, a script without DistributedSampler, a launch without --max-restarts, files left by an older run,
copied values) with a hint that does not give the answer. Fake launch results name real files written here;
one real launch of a wrong conversion shows the check refusing what a run really produced.
``RIGHT08`` and ``WRONG08`` have the shape of tests/test_exercises_cases.py's RIGHT and WRONG.

08.2 and 08.3 compare with what the lesson's own launches wrote (the uninterrupted run of section 2, the
preempted run's snapshot of section 4), read from the notebook's folder as in tests/test_exercises_runs.py:
here fake lesson folders (JPY_SESSION_NAME's parent), ``_lesson`` in a case naming another one than LESSON."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import notebook_in, refused_text  # tests/ is on sys.path

from ddp_helpers import exercises
from ddp_helpers.launch import EXIT_ABORT_TEXT, LaunchResult, WorkerFailed, torchrun
from ddp_helpers.series import NOTEBOOK_DIR, ROOT

TMP = Path(tempfile.mkdtemp(prefix="exercise_nb08_"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def solution(prefix: str) -> str:
    """The notebook's own %%writefile solution cell for ``prefix`` (its script, without the magic line)."""
    cells = json.loads((NOTEBOOK_DIR / "08_capstone_digits.ipynb").read_text())["cells"]
    cell = next(c for c in cells if "".join(c["source"]).startswith(f"%%writefile scripts/{prefix}"))
    return "".join(cell["source"]).split("\n", 1)[1]


def launch(script: Path, stdout: dict, *, flags: str = "", out: Path | None = None, nproc: int = 2) -> LaunchResult:
    args = f" --out {out}" if out is not None else ""
    return LaunchResult(command=f"torchrun --standalone --nproc-per-node={nproc} {flags} -- {script}{args}".replace(
        "  ", " "), stdout=stdout, seconds=1.0)


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


def script(name: str, text: str) -> Path:
    """``text`` as 08_ex_ddp_digits.py in a folder of its own."""
    path = TMP / name / "08_ex_ddp_digits.py"
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


# the notebook's folders: the lesson's runs, none yet, runs that differ, the killed run in the straight run's place
LESSON, EMPTY, ODD, SELF = (TMP / name for name in ("lesson", "empty_lesson", "odd_lesson", "self_lesson"))
for _folder in (LESSON, EMPTY, ODD, SELF):
    _folder.mkdir()
LESSON_RUNS = "runs/08_capstone"

# --- 08.2: the killed run -----------------------------------------------------------------------------
COPY = TMP / "s2" / "train_ddp.py"
COPY.parent.mkdir()
shutil.copyfile(ROOT / "templates" / "train_ddp.py", COPY)
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
RESTARTS = "--max-restarts=1"

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
    "08.1": [dict(converted=launch(CONVERTED, HALVES, out=RESULT_OK)),
             dict(converted=launch(QUALIFIED, {0: ["rank 0 trains on 700 samples per epoch"],
                                               1: ["rank 1 trains on 700 samples per epoch"]}, out=RESULT_OK)),
             dict(converted=launch(HELPER, HALVES, out=RESULT_OK)),  # the series' distributed()
             dict(converted=launch(ACCUMULATE, HALVES, out=RESULT_OK))],  # 2 micro-batches of 16 per rank and step
    "08.2": [dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=True),
             dict(killed_again=launch(COPY, RESTARTED, flags="--max-restarts 3", out=KILLED), equal=torch.tensor(True)),
             dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=np.bool_(True))],
    "08.3": [dict(next_epoch=1, next_step=11, next_lr=0.0021875),
             dict(next_epoch=np.int64(1), next_step=torch.tensor(11), next_lr=np.float64(0.0021875)),
             dict(next_epoch=1.0, next_step=torch.tensor(11, dtype=torch.int32), next_lr=torch.tensor(0.0021875,
                                                                                                      dtype=torch.float64)),
             dict(next_epoch=2, next_step=3, next_lr=0.0005, _lesson=ODD)],  # another lesson run: its own snapshot
}
WRONG08 = {
    "08.1": [("a silent rank", dict(converted=launch(CONVERTED, {0: HALVES[0], 1: []}, out=RESULT_OK))),
             ("no DistributedSampler", dict(converted=launch(NO_SAMPLER, WHOLE, out=RESULT_OK))),
             ("no DistributedSampler, printing the halves", dict(converted=launch(NO_SAMPLER, HALVES, out=RESULT_OK))),
             ("doubled global batch", dict(converted=launch(WRONG1["doubled global batch"], HALVES, out=RESULT_OK))),
             ("every rank writes result.json", dict(converted=launch(WRONG1["every rank writes result.json"], HALVES,
                                                                    out=RESULT_OK))),
             ("no DDP wrap", dict(converted=launch(WRONG1["no DDP wrap"], HALVES, out=RESULT_OK))),
             ("the plain script", dict(converted=launch(WRONG1["the plain script"], HALVES, out=RESULT_OK))),
             ("each rank printed everything", dict(converted=launch(CONVERTED, WHOLE, out=RESULT_OK))),
             ("a stale run: the script edited after its launch", dict(converted=launch(CONVERTED, HALVES,
                                                                                       out=RESULT_OLD))),
             ("one process", dict(converted=launch(CONVERTED, {0: HALVES[0]}, out=RESULT_OK, nproc=1))),
             ("world size 1 recorded", dict(converted=launch(CONVERTED, HALVES, out=RESULT_ONE))),
             ("a low test accuracy", dict(converted=launch(CONVERTED, HALVES, out=RESULT_LOW))),
             ("no --out", dict(converted=launch(CONVERTED, HALVES))),
             ("a launch of another script", dict(converted=launch(COPY, HALVES, out=RESULT_OK))),
             ("a launch that failed in its work", dict(converted=WorkerFailed(
                 1, 1, "ValueError: bad", "torchrun", result=launch(CONVERTED, HALVES, out=RESULT_OK))))],
    "08.2": [("copy-through: the learner's own run as the reference", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=DIFFERENT), equal=True, reference=DIFFERENT)),
             ("no uninterrupted run yet", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED),
                                               equal=True, _lesson=EMPTY)),
             ("launched into the uninterrupted run's folder", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=IN_PLACE), equal=True, _lesson=SELF)),
             ("the lesson's straight run was restarted", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=True, _lesson=ODD)),
             ("no --max-restarts", dict(killed_again=launch(COPY, RESTARTED, out=KILLED), equal=True)),
             ("nothing killed", dict(killed_again=launch(COPY, UNKILLED, flags=RESTARTS, out=KILLED), equal=True)),
             ("a finished run relaunched", dict(killed_again=launch(COPY, FINISHED, flags=RESTARTS, out=KILLED),
                                                equal=True)),
             ("files from an older run", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=STALE),
                                              equal=True)),
             ("a log of another cut", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=OTHER_CUT),
                                           equal=True)),
             ("weights differ", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=DIFFERENT), equal=True)),
             ("equal said False", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=False)),
             ("equal as a string", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal="True"))],
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


# right answers whose run the doctor has advice about: the verdict, then the clean exit's note
NOTED = {"no del model": dict(converted=launch(HELD, HALVES, out=RESULT_OK)),
         "an exit abort after the work, in the doctor's run": dict(converted=launch(ABORTS, HALVES, out=RESULT_OK)),
         "the learner's launch ended in the exit abort": dict(converted=aborted(launch(CONVERTED, HALVES,
                                                                                      out=RESULT_OK)))}
# what each 08.1 refusal must say: what the ranks did (or why the launch is not the script's), not the answer
SAYS1 = {"a silent rank": "printed nothing",
         "no DistributedSampler": "ranks 0 and 1 iterated the same 1400 samples",
         "no DistributedSampler, printing the halves": "ranks 0 and 1 iterated the same 1400 samples",
         "doubled global batch": "global batches of 120 or 128 samples",
         "every rank writes result.json": "ranks 0 and 1 each wrote out/result.json",
         "no DDP wrap": "no DistributedDataParallel built",
         "the plain script": "without init_process_group",
         "each rank printed everything": "did not print how many samples its sampler gives it",
         "a stale run: the script edited after its launch": "older than the script",
         "one process": "ran 1 process",
         "world size 1 recorded": "world size of 2",
         "a low test accuracy": "below 85%",
         "no --out": "no result.json",
         "a launch of another script": "did not run 08_ex_ddp_digits.py",
         "a launch that failed in its work": "exited with code 1"}


@pytest.fixture(autouse=True)
def lesson(monkeypatch):
    """The running notebook is LESSON/notebook.ipynb: the lesson's runs are LESSON/runs/08_capstone/..."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(LESSON / "notebook.ipynb"))


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


def test_a_real_launch_of_a_conversion_without_distributed_sampler_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    converted = real_launch(tmp_path, NO_SAMPLER)
    ran = converted.result if isinstance(converted, WorkerFailed) else converted
    assert ran.stdout[1] == ["rank 1: 1400 samples per epoch"]  # each rank trained on everything
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.check_08_1(converted=converted)
    assert "ranks 0 and 1 iterated the same 1400 samples" in str(info.value)
    assert "DistributedSampler" in str(info.value)


@pytest.mark.parametrize("source, note", [(CONVERTED, False), (HELD, True)])
def test_a_real_launch_of_a_right_conversion_is_accepted(tmp_path, monkeypatch, capsys, source, note):
    """The notebook's solution, and the same without `del model` (its group held at exit: the note, every time,
    whether or not gloo's abort came)."""
    monkeypatch.chdir(tmp_path)
    converted = real_launch(tmp_path, source, epochs=5)
    exercises.check_08_1(converted=converted)
    noted = note or isinstance(converted, WorkerFailed)
    assert capsys.readouterr().out.endswith(f"{CLEAN_EXIT_NOTE}\n" * noted + "✓ Exercise 08.1: correct\n")
