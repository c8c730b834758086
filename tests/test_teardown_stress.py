"""tools/teardown_stress.py counts what it says: an abort at exit is counted, a clean exit is not."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_an_abort_at_exit_is_counted_and_a_clean_exit_is_not(tmp_path):
    aborts = tmp_path / "aborts.py"
    aborts.write_text("import os, sys\nprint('work done')\nif os.environ['RANK'] == '1':\n"
                      "    sys.stderr.write('terminate called without an active exception\\n')\n    os.abort()\n")
    clean = tmp_path / "clean.py"
    clean.write_text("print('work done')\n")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "teardown_stress.py"), "--launches", "2",
                          "--scripts", str(aborts), str(clean)], capture_output=True, text=True, timeout=180)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "aborts.py: 1 aborts in 1 launches" in run.stdout
    assert "clean.py: 0 aborts in 1 launches (exit codes {0: 1})" in run.stdout
    assert "teardown stress: 1 aborts in 2 launches" in run.stdout


def test_bad_input_is_refused_before_anything_starts(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "teardown_stress.py"), "--scripts",
                          str(tmp_path / "missing.py")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no such script" in run.stderr
