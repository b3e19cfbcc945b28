"""The launcher's own signals: Ctrl-C, SIGTERM and SIGHUP stop it cleanly with the right exit status.

Each becomes an ``Interrupted`` exception (a ``KeyboardInterrupt``, so the local runner's cleanup
runs for all three alike) that carries the signal; the entry point turns it into one line saying
how to resume and exits with 128 + the signal number, as a shell would report.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The launcher received ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def raise_interrupted(signum, _frame) -> None:
    raise Interrupted(signum)


def signum_of(exc: KeyboardInterrupt) -> int:
    """The signal behind a ``KeyboardInterrupt`` (a plain one is Ctrl-C)."""
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While inside: SIGINT, SIGTERM and SIGHUP raise ``Interrupted``."""
    previous = {sig: signal.signal(sig, raise_interrupted) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
