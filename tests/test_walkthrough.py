"""ddp_helpers.viz.walkthrough: diffs between the walkthrough's step files, one idea per step."""

import re
from pathlib import Path

import pytest

from ddp_helpers.viz.walkthrough import script_diff

WALK = Path(__file__).resolve().parent.parent / "notebooks" / "walkthrough"
STEPS = sorted(WALK.glob("step[0-9]_*.py"))

# The idea of each step, as the words every line its diff adds or removes must contain (blank lines
# aside). A line outside them means a second idea crept into the step.
IDEAS = {
    "step1": r"RandomSampler|Generator|order|shuffle",
    "step2": r"torch\.distributed|init_process_group|destroy_process_group|barrier|del model",  # and the clean exit
    "step3": r"\bos\b|LOCAL_RANK|LOCAL_WORLD_SIZE|device|else:",
    "step4": r"DistributedSampler|sampler|RandomSampler|order",
    "step5": r"all_reduce|for p in model\.parameters\(\)",
    "step6": r"DDP|DistributedDataParallel|all_reduce|for p in model\.parameters\(\)",
    "step7": r"GLOBAL_BATCH|world_size",
    "step8": r"loss|logged|get_rank|print",
    "step9": r"get_rank|out\.mkdir|torch\.save",
}


def changed(diff):
    """The lines a diff adds, and the lines it removes without adding any in the same hunk (a removed
    line that is replaced is judged by its replacement); blank lines aside."""
    hunks, lines = [], []
    for line in diff.lines:
        if line.startswith("@@"):
            hunks.append(lines := [])
        elif line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip():
            lines.append(line)
    return [line[1:] for hunk in hunks for line in hunk
            if line[0] == "+" or not any(other[0] == "+" for other in hunk)]


def test_steps_are_a_chain_of_one_idea_each():
    assert [p.name[:5] for p in STEPS] == [f"step{k}" for k in range(10)]
    for old, new in zip(STEPS, STEPS[1:], strict=False):
        diff = script_diff(old, new)
        idea = re.compile(IDEAS[new.name[:5]])
        assert diff.added >= 1 and diff.added + diff.removed <= 12, (new.name, diff.added, diff.removed)
        stray = [line for line in changed(diff) if not idea.search(line)]
        assert stray == [], (new.name, stray)


def test_diffs_leave_the_docstrings_out():
    for old, new in zip(STEPS, STEPS[1:], strict=False):
        assert new.read_text().startswith(f'"""Step {new.name[4]}: '), new.name  # each file names its step
        text = repr(script_diff(old, new))
        assert '"""' not in text and "Step " not in text, new.name


def test_hunk_headers_keep_the_files_line_numbers(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('"""Old,\non two lines."""\nx = 1\ny = 2\n')
    b.write_text('"""New."""\nx = 1\ny = 3\n')
    diff = script_diff(a, b, context=0)
    assert repr(diff).splitlines() == ["--- a.py", "+++ b.py", "@@ -4 +3 @@", "-y = 2", "+y = 3"]
    assert a.read_text().splitlines()[3] == "y = 2" and b.read_text().splitlines()[2] == "y = 3"


def test_a_changed_docstring_alone_is_no_change(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('"""Step 1."""\nx = 1\n')
    b.write_text('"""Step 2, longer."""\nx = 1\n')
    assert script_diff(a, b).lines == ()
    c = tmp_path / "c.py"
    c.write_text("x = 1\n")              # no docstring: nothing is dropped
    assert script_diff(c, a).lines == ()


def test_diff_text_and_html(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\ny = <2>\n")
    b.write_text("x = 1\ny = <3>\n")
    diff = script_diff(a, b)
    assert repr(diff).splitlines() == ["--- a.py", "+++ b.py", "@@ -1,2 +1,2 @@", " x = 1", "-y = <2>", "+y = <3>"]
    assert (diff.added, diff.removed) == (1, 1)
    html = diff._repr_html_()
    assert "&lt;3&gt;" in html and "#e6ffec" in html and "#ffebe9" in html


def test_a_second_idea_is_caught(tmp_path):
    """The one-idea rule fails on a step that also changes something else."""
    old, new = STEPS[4], tmp_path / "step5_hand_average.py"
    new.write_text(STEPS[5].read_text().replace("lr=0.05", "lr=0.1"))
    stray = [line for line in changed(script_diff(old, new)) if not re.search(IDEAS["step5"], line)]
    assert stray == ["    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"]


def test_missing_step_says_where_steps_live(tmp_path):
    with pytest.raises(FileNotFoundError, match="notebooks/walkthrough"):
        script_diff(tmp_path / "nope.py", STEPS[0])
