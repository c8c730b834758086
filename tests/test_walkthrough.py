"""ddp_helpers.viz.walkthrough: diffs between the walkthrough's step files."""

from pathlib import Path

import pytest

from ddp_helpers.viz.walkthrough import script_diff

WALK = Path(__file__).resolve().parent.parent / "notebooks" / "walkthrough"
STEPS = sorted(WALK.glob("step[0-9]_*.py"))


def test_steps_are_a_chain_of_small_changes():
    assert [p.name[:5] for p in STEPS] == [f"step{k}" for k in range(6)]
    for old, new in zip(STEPS, STEPS[1:], strict=False):
        diff = script_diff(old, new)
        assert diff.added >= 1 and diff.added + diff.removed <= 20, (new.name, diff.added, diff.removed)


def test_diff_text_and_html(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\ny = <2>\n")
    b.write_text("x = 1\ny = <3>\n")
    diff = script_diff(a, b)
    assert repr(diff).splitlines() == ["--- a.py", "+++ b.py", "@@ -1,2 +1,2 @@", " x = 1", "-y = <2>", "+y = <3>"]
    assert (diff.added, diff.removed) == (1, 1)
    html = diff._repr_html_()
    assert "&lt;3&gt;" in html and "#e6ffec" in html and "#ffebe9" in html


def test_missing_step_says_where_steps_live(tmp_path):
    with pytest.raises(FileNotFoundError, match="notebooks/walkthrough"):
        script_diff(tmp_path / "nope.py", STEPS[0])
