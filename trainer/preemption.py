"""Stop at the next step boundary with a checkpoint when the scheduler asks (time limit, preemption).

Slurm warns a job before it stops it: submitit's ``--signal=USR2@<delay>`` before the time limit,
``SIGTERM`` on preemption or ``scancel``. The trainer then finishes the step it is in, saves a
checkpoint at that step and exits with ``EXIT_CHECKPOINTED``, so the job runtime can requeue it
and the resumed run continues bit-identically from that step instead of the last periodic one.

With ``dp_size`` ranks the signal reaches the spawning parent, which forwards it to every rank
(``ForwardToRanks``); the ranks then agree on the stop at a step boundary (``trainer.loop``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

# The signals that ask for checkpoint-and-stop.
CHECKPOINT_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
# The trainer's exit code after a requested checkpoint-and-stop (EX_TEMPFAIL: "try again later").
EXIT_CHECKPOINTED = 75


def hold_signals() -> None:
    """Block ``CHECKPOINT_SIGNALS`` (as the job runtime does before it starts the trainer), so that
    processes spawned now inherit the block and hold a warning until their handler is set."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, CHECKPOINT_SIGNALS)


def deliver_held_signals() -> None:
    """Unblock ``CHECKPOINT_SIGNALS``. The job runtime starts the trainer with them blocked, so that
    a warning arriving while Python and torch load is held instead of killing the process; a held
    one is delivered now (to the handler, once ``StopRequest.install`` has set it)."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CHECKPOINT_SIGNALS)


class StopRequest:
    """Set by one of ``CHECKPOINT_SIGNALS``; the training loop polls it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _on_signal(self, signum, _frame) -> None:
        self.signum = self.signum or signum

    def install(self) -> StopRequest | None:
        """Handle ``CHECKPOINT_SIGNALS`` until ``uninstall``; None off the main thread (Python
        delivers signals to the main thread only, so a trainer run from a thread keeps the defaults)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in CHECKPOINT_SIGNALS}
        deliver_held_signals()
        return self

    def uninstall(self) -> None:
        for sig, handler in getattr(self, "_previous", {}).items():
            signal.signal(sig, handler)


class ForwardToRanks:
    """In the parent of spawned ranks: pass each of ``CHECKPOINT_SIGNALS`` on to every rank.

    The runtime signals the trainer process only (signalling its process group would also hit
    helpers such as multiprocessing's resource tracker, which a USR2 kills). The ranks are spawned
    while the signals are still blocked, so they inherit the block and hold a forwarded warning
    until their own ``StopRequest`` is installed; ``install`` unblocks here only after that, and a
    warning held by the parent during start-up is forwarded then.
    """

    def __init__(self, pids: list[int]) -> None:
        self.pids = list(pids)

    def _on_signal(self, signum, _frame) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # that rank has already exited
                os.kill(pid, signum)

    def install(self) -> ForwardToRanks:
        if threading.current_thread() is not threading.main_thread():
            return self  # Python delivers signals to the main thread only: nothing to forward
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in CHECKPOINT_SIGNALS}
        deliver_held_signals()
        return self

    def uninstall(self) -> None:
        for sig, handler in getattr(self, "_previous", {}).items():
            signal.signal(sig, handler)
