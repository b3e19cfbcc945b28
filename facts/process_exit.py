"""Leave a command's process as ``sys.exit`` does, less the interpreter's teardown.

At a normal exit CPython joins the threads that are not daemons, runs the ``atexit`` callbacks (logging's flush,
Ray's shutdown, multiprocessing's joins, ``weakref.finalize``'s clean-ups), and then tears the interpreter down:
every module's globals cleared and every object freed one by one, a last garbage collection. With torch and
transformers loaded the teardown alone is about a second of CPU (a toy trainer process of 10 steps: 7.5-7.6 -> 6.4-6.5
CPU s without it, BENCHMARKS.md "stop 43"), spent freeing memory the kernel frees at once when the process ends.

``exit_now(status)`` keeps everything of a normal exit that has an effect outside the process: the ``atexit``
callbacks, then the standard streams flushed; only the teardown is skipped (``os._exit``). Where a thread that is
not a daemon is still alive it exits the normal way, which waits for it.

The callbacks run through ``atexit._run_exitfuncs``, the function the interpreter itself calls at exit: a private
name of the standard library, pinned here alone and by tests/facts/test_process_exit.py (a callback runs once, its
file is written, the status is kept).

What it gives up: a file object left open and unflushed by the program is flushed at teardown, not here. The
commands that call it close what they write (the test above runs the trainer with ResourceWarning shown: none; an
evidence build and audit run so show none either).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_now(status: int | None) -> NoReturn:
    """``sys.exit(status)`` without the interpreter's teardown (module docstring); None is status 0, as there."""
    status = 0 if status is None else status
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()  # private, pinned (module docstring); it clears them, so none runs twice
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: a normal exit loses it too
            stream.flush()
    os._exit(status)
