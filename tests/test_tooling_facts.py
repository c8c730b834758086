"""What the notebooks say about the series' own tooling (its batch script, its tests, its notebooks' sections,
the doctor's and the launcher's links into them), checked here rather than in a notebook: a learner would skip
these checks, and they are about the series, not about DDP. Each test's docstring names the notebook section
that makes the statement."""

import json
import re
import subprocess
from pathlib import Path

from ddp_helpers.doctor import catalog
from ddp_helpers.launch import WorkerFailed

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NB09 = NOTEBOOKS / "09_multinode_and_debugging.ipynb"


def cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text())["cells"]


def text_of(notebook: Path) -> str:
    return "\n".join("".join(c["source"]) for c in cells(notebook))


def markdown_with(notebook: Path, needle: str) -> str:
    return next("".join(c["source"]) for c in cells(notebook)
                if c["cell_type"] == "markdown" and needle in "".join(c["source"]))


# --- notebook 05, section 9: the runtime's timeout --------------------------------------------------------

def stated_timeout_s(text: str) -> int:
    return int(re.search(r"This series' runtime uses (\d+) s\.", text).group(1))


def test_nb05_the_runtime_timeout_is_the_one_the_notebook_states():
    """05 section 9, "Common mistake: a collective inside `if rank == 0:`": the series' runtime uses a 60 s
    process-group timeout (ddp_helpers.runtime.DEFAULT_TIMEOUT_S), where torch's default is 30 minutes."""
    from ddp_helpers.runtime import DEFAULT_TIMEOUT_S

    text = markdown_with(NOTEBOOKS / "05_checkpoints_and_fault_tolerance.ipynb", "## 9. Common mistake")
    assert stated_timeout_s(text) == DEFAULT_TIMEOUT_S == 60
    assert stated_timeout_s("This series' runtime uses 600 s.") != DEFAULT_TIMEOUT_S


# --- notebook 09, section 2: the batch script the table explains, and the tests make test-slurm runs --------

SBATCH = ROOT / "cluster" / "slurm_ddp.sbatch"
# the parts of the batch script that 09's line-by-line table explains, as the script writes them
SBATCH_PARTS = (
    "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
    "set -euo pipefail", "command -v torchrun", 'scontrol show hostnames "$SLURM_JOB_NODELIST"',
    "rdzv_port=${RDZV_PORT:-$(( 20000 + SLURM_JOB_ID % 10000 ))}", "gpus=${SLURM_GPUS_ON_NODE:-0}",
    "nproc_per_node=$NPROC_PER_NODE", "threads=$(( SLURM_CPUS_PER_TASK / nproc_per_node ))",
    'srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" --label torchrun',
    '--nnodes="$SLURM_NNODES"', '--nproc-per-node="$nproc_per_node"',
    '--rdzv-id="$SLURM_JOB_ID"', "--rdzv-backend=c10d", '--rdzv-endpoint="$head_node:$rdzv_port"',
    '"$script" "$@" || status=$?', 'exit "$status"', '"Root Cause"', "NCCL_DEBUG", "NCCL_SOCKET_IFNAME")
# what the table says the script does not do: a fixed node rank or port, a silent default of 4 workers
SBATCH_ABSENT = ("--node-rank", "MASTER_PORT", "29500", ":-4}")


def sbatch_problems(text: str) -> list[str]:
    return ([f"missing: {part}" for part in SBATCH_PARTS if part not in text]
            + [f"present: {part}" for part in SBATCH_ABSENT if part in text])


def test_nb09_the_batch_script_has_every_part_the_table_explains():
    """09 section 2, "Line by line": the table's rows name these lines of cluster/slurm_ddp.sbatch."""
    text = SBATCH.read_text()
    assert sbatch_problems(text) == []
    check = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr  # valid bash syntax
    table = markdown_with(NB09, "| lines | what they do |")
    for part in ("#SBATCH --nodes=2", "--ntasks-per-node=1", "set -euo pipefail", "command -v torchrun",
                 "--rdzv-backend=c10d", "srun --kill-on-bad-exit=1", "NCCL_SOCKET_IFNAME"):
        assert part in table, part


def test_nb09_the_batch_script_check_fails_on_a_drifted_script():
    text = SBATCH.read_text()
    drifted = text.replace("--kill-on-bad-exit=1 ", "").replace("--rdzv-backend=c10d", "--rdzv-backend=c10d "
                                                                  "--node-rank=0")
    assert sbatch_problems(drifted) == [
        'missing: srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" --label torchrun',
        "present: --node-rank"]


def test_nb09_make_test_slurm_runs_the_three_tests_the_notebook_names():
    """09 section 2, "The same job on a real Slurm cluster": the checks make test-slurm runs, and the record
    the notebook reads is written by them."""
    slurm_tests = (ROOT / "tests" / "slurm" / "test_slurm.py").read_text()
    names = re.findall(r"^def (test_\w+)\(cluster\)", slurm_tests, flags=re.M)
    assert names == ["test_two_nodes_complete_with_the_expected_ranks",
                     "test_a_failing_rank_fails_the_job_and_is_named", "test_two_jobs_at_once_on_the_same_first_node"]
    assert 'SBATCH = "cluster/slurm_ddp.sbatch"' in slurm_tests and "RECORD.write_text" in slurm_tests
    said = markdown_with(NB09, "`make test-slurm` runs are the three test functions")
    for words in ("two-node\njob with the expected ranks", "a failing rank that fails the job and is named",
                  "two jobs at once on the\nsame first node"):
        assert words in said, words


# --- notebook 09, section 8: the checklist's links -----------------------------------------------------------

def sections_of(notebook: Path) -> dict[str, str]:
    """Section number -> the text (markdown and code) from its `## N.` heading to the next one."""
    parts = re.split(r"^## (\d+)\. ", text_of(notebook), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def checklist_rows(text: str) -> list[list[str]]:
    table_lines = [line for line in text.split("A checklist of common failures", 1)[1].splitlines()
                   if line.startswith("|")]
    return [[col.strip() for col in line.strip("|").split("|")] for line in table_lines[2:]]  # past header, ---


def unverified_links(rows: list[list[str]], sections) -> tuple[list[tuple], int]:
    """(links whose section does not demonstrate the row, links checked). ``sections(notebook)`` gives
    {number: text}; a section demonstrates a row when it asserts and names a term of its cause or fix."""
    bad, checked = [], 0
    for symptom, cause, fix, where in rows:
        targets = re.findall(r"\((\d\d_\w+\.ipynb)\) ((?:§\d+(?:, )?)+)", where)
        targets += [(NB09.name, f"§{n}") for n in re.findall(r"§(\d+) above", where)]
        if not targets:
            bad.append((symptom, "no link"))
        for notebook, numbers in targets:
            for number in re.findall(r"\d+", numbers):
                section = sections(notebook).get(number, "")
                terms = re.findall(r"`([^`]+)`", cause + " " + fix) or [symptom]
                names = [max(re.findall(r"\w+", t), key=len) for t in terms]  # `sampler.set_epoch(epoch)` -> set_epoch
                if "assert" not in section or not any(name in section for name in names):
                    bad.append((symptom, notebook, number))
                checked += 1
    return bad, checked


def test_nb09_every_checklist_link_names_a_section_that_demonstrates_it():
    """09 section 8, "A checklist of common failures": each linked notebook exists and its section asserts
    what the row names."""
    rows = checklist_rows(markdown_with(NB09, "## 8. A checklist of common failures"))
    bad, checked = unverified_links(rows, lambda name: sections_of(NOTEBOOKS / name))
    assert bad == [] and len(rows) == 9 and checked >= len(rows)


def test_nb09_the_checklist_check_fails_on_a_wrong_link():
    row = ["one rank never arrives", "a straggler", "`monitored_barrier` names it", "§3 above"]
    sections = {"3": "assert seconds > 1  # a hang", "4": "assert missing  # monitored_barrier"}
    assert unverified_links([row], lambda name: sections) == ([(row[0], NB09.name, "3")], 1)
    assert unverified_links([[*row[:3], "§4 above"]], lambda name: sections) == ([], 1)
    assert unverified_links([[*row[:3], "nowhere"]], lambda name: sections)[0] == [(row[0], "no link")]


# --- the doctor's and the launcher's links into the notebooks -----------------------------------------------

def headings(notebook: Path) -> set[str]:
    return {m.group(1).strip() for c in cells(notebook) if c["cell_type"] == "markdown"
            for m in re.finditer(r"^#{2,4} (.+)$", "".join(c["source"]), flags=re.M)}


def notebook_named(number: str) -> Path:
    found = sorted(NOTEBOOKS.glob(f"{number}_*.ipynb"))
    assert len(found) == 1, number
    return found[0]


def unlinked(sections: dict[str, str]) -> list[str]:
    """Finding ids whose section ("notebook NN, HEADING") is not a heading of notebook NN."""
    bad = []
    for ident, section in sections.items():
        found = re.fullmatch(r"notebook (\d\d), (.+)", section)
        if not found or found.group(2) not in headings(notebook_named(found.group(1))):
            bad.append(ident)
    return bad


def test_every_doctor_finding_links_a_heading_of_its_notebook():
    """The doctor's report names, for each finding, the notebook section that teaches it: that heading exists
    (gloo-exit-abort: 09 section 7)."""
    assert unlinked({ident: entry.section for ident, entry in catalog.CATALOG.items()}) == []
    assert catalog.CATALOG["gloo-exit-abort"].section.startswith("notebook 09, 7. ")


def test_a_doctor_link_to_a_missing_heading_is_found():
    assert unlinked({"a": "notebook 09, 7. No such section", "b": "section 3",
                     "c": catalog.CATALOG["hang"].section}) == ["a", "b"]


def test_the_exit_abort_message_points_at_the_section_that_explains_it():
    """The launcher's WorkerFailed message for gloo's exit abort cites 09 section 7, whose heading names it and
    whose worker counts the gloo threads."""
    message = str(WorkerFailed(0, -6, "terminate called without an active exception", "torchrun x.py"))
    number, section = re.search(r"notebook (\d\d), section (\d+)\)", message).groups()
    text = sections_of(notebook_named(number))[section]
    assert text.startswith("Exit code -6 after the work is done: gloo's exit abort")
    assert "pytorch/pytorch#190489" in text and "scripts/09_exit_abort.py" in text and "assert" in text
