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
# What the parent of spawned ranks sends them for any of CHECKPOINT_SIGNALS (see ForwardToRanks).
FORWARDED_SIGNAL = signal.SIGUSR2
# The trainer's exit code after a requested checkpoint-and-stop (EX_TEMPFAIL: "try again later").
EXIT_CHECKPOINTED = 75
# A trainer that stopped on that request without saving anything it can resume from (an external trainer
# with no checkpoint-and-stop handler): the job may run again, and its run then starts from scratch.
EXIT_STOPPED_UNSAVED = 76


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
        """Handle ``CHECKPOINT_SIGNALS`` for the rest of the process; None off the main thread
        (Python delivers signals to the main thread only, so a trainer run from a thread keeps the
        defaults). Never uninstalled: Slurm signals every process of the task, and a warning that
        arrives after the last step has nothing left to stop, while the default action would kill
        a trainer that has finished its run (the job would fail with -12 after completing)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        for sig in CHECKPOINT_SIGNALS:
            signal.signal(sig, self._on_signal)
        deliver_held_signals()
        return self


class ForwardToRanks:
    """In the parent of spawned ranks: pass each of ``CHECKPOINT_SIGNALS`` on to every rank.

    The runtime signals the trainer process only (signalling its process group would also hit
    helpers such as multiprocessing's resource tracker). The handler is set before the ranks are
    spawned: starting that resource tracker unblocks SIGTERM in this process, so the block alone
    would not hold a warning here. A warning that arrives before the ranks exist is kept and
    forwarded once they do. It is forwarded as ``FORWARDED_SIGNAL``: the ranks inherit it blocked
    (``hold_signals``) and hold it until their ``StopRequest`` is installed, whereas SIGTERM may
    reach them unblocked (the same resource tracker) and would kill a rank still starting.
    """

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.early: int | None = None

    def _on_signal(self, signum, _frame) -> None:
        if not self.pids:
            self.early = signum
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # that rank has already exited
                os.kill(pid, FORWARDED_SIGNAL)

    def install(self) -> ForwardToRanks:
        """Before the ranks are spawned: forward from now on, for the rest of the process (like
        ``StopRequest.install``), and block the signals so that the ranks inherit the block."""
        if threading.current_thread() is threading.main_thread():  # else no signal reaches us
            for sig in CHECKPOINT_SIGNALS:
                signal.signal(sig, self._on_signal)
        hold_signals()
        return self

    def ranks_started(self, pids: list[int]) -> None:
        """The ranks exist: deliver what this process held and forward a warning kept before."""
        self.pids = list(pids)
        deliver_held_signals()
        if self.early is not None:
            self._on_signal(self.early, None)
