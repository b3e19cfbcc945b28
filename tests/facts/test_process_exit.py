"""facts.process_exit.exit_now: a normal exit's effects (atexit callbacks once, streams flushed, the status) less
the interpreter's teardown, and the normal exit where a thread still runs."""

import subprocess
import sys

import pytest

from facts.repo import REPO_ROOT

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from facts.process_exit import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: out.joinpath("callback").open("a").write("ran\\n"))
with open(out / "written", "w") as f:
    f.write("kept")
if sys.argv[2] == "thread":  # a thread that is not a daemon: the normal exit waits for it
    threading.Thread(target=lambda: (time.sleep(0.5), out.joinpath("thread").write_text("done"))).start()
print("unflushed", end="")
sys.stderr.write("to stderr")
exit_now(3)
"""


@pytest.mark.parametrize("case", ["plain", "thread"])
def test_the_status_the_callbacks_once_and_the_streams_survive_the_skipped_teardown(tmp_path, case):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), case], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert (proc.stdout, proc.stderr) == ("unflushed", "to stderr")
    assert (tmp_path / "callback").read_text() == "ran\n" and (tmp_path / "written").read_text() == "kept"
    assert (tmp_path / "thread").is_file() == (case == "thread")


@pytest.mark.slow
def test_the_trainer_leaves_no_file_open_for_the_teardown_to_flush(tmp_path):
    """What exit_now gives up (a file left open, flushed only at teardown): the trainer, exiting the normal way
    with ResourceWarning shown, leaves none."""
    run = [sys.executable, "-W", "always::ResourceWarning", "-c",
           "import sys; from trainer.__main__ import main; sys.exit(main())",
           "algo=grpo", "seed=1", "workload.n_updates=2", "workload.eval.n_prompts=4", f"output_dir={tmp_path / 'run'}"]
    proc = subprocess.run(run, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ResourceWarning" not in proc.stderr, proc.stderr[-3000:]
