"""The walkthrough's plain scripts end with no gloo worker thread alive (their clean exit, notebook 00 step 2;
the mechanism: notebook 09).

A gloo thread still alive at interpreter exit can abort the process ("terminate called without an
active exception"). destroy_process_group() frees the group, which joins those threads, only when
nothing else holds it: torch.distributed.nn.functional, imported after init_process_group (by the
first optimizer or DDP model), holds it in its default arguments, and so does a DDP model.
"""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

WALK = Path(__file__).resolve().parent.parent / "notebooks" / "walkthrough"
STEPS = sorted(WALK.glob("step[0-9]_*.py"))

# Runs a step in one process (world size 1) and reports the gloo threads left when the last atexit
# handler runs, the last Python code before the interpreter finalizes.
PROBE = """
import atexit, os, runpy, sys
def count():
    n = 0
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/comm") as f:
            n += f.read().strip() == "pt_gloo_runloop"
    print(f"gloo threads at exit: {n}", flush=True)
atexit.register(count)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


CLEAN_EXIT = r"^    dist\.barrier\(\)  # clean exit\b.*\n    del model\b.*\n    dist\.destroy_process_group\(\)\n"


def test_the_clean_exit_enters_with_the_group_and_stays_the_same():
    """One idiom, from the step that creates the group (step 2) to the last: torch.distributed.nn imported
    before init_process_group, and barrier, del model, destroy_process_group as the script's last lines."""
    steps = [p for p in STEPS if "init_process_group(" in p.read_text()]
    assert [p.name[:5] for p in steps] == [f"step{k}" for k in range(2, 10)]
    endings = set()
    for path in steps:
        text = path.read_text()
        assert re.search(r"^import torch\.distributed\.nn\b", text, re.M), path.name
        assert text.index("import torch.distributed.nn") < text.index("init_process_group("), path.name
        ending = re.search(CLEAN_EXIT, text, re.M)
        assert ending and text[ending.end():].strip() == 'if __name__ == "__main__":\n    main()', path.name
        endings.add(ending.group())
    assert len(endings) == 1  # the same three lines in every step


def test_the_last_step_leaves_no_gloo_thread_at_exit(tmp_path):
    if not os.path.isdir("/proc/self/task"):
        import pytest

        pytest.skip("counts threads through /proc (Linux)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-c", PROBE, str(WALK / "step9_rank0_save.py"), str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "gloo threads at exit: 0", run.stdout
    assert (tmp_path / "model.pt").is_file()
