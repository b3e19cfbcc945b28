"""The rewards a workload can score with (``workload.reward``), stated once: the trainer scores with them
(the reward workers call ``Reward.score``) and the evidence re-scores every
evaluated response with the very same function, never trusting a stored reward.

Built-in rewards, each a pure function of (response, label):

``gsm8k_hash`` (the default, ``math_reward``)
    The last number in the response against the scalar target. GSM8K labels come as a worked rationale ending
    ``#### <number>``; seed 000's all-zero-reward incident came from comparing against that rationale form, so
    labels are normalised with ``answer.rsplit("####", 1)[1].strip()`` before any comparison.
``math_boxed``
    The content of the response's last ``\\boxed{...}`` against the label, compared for mathematical
    equivalence by ``math-verify`` (Hugging Face's maintained checker: ``1/2``, ``0.5`` and ``\\frac{1}{2}``
    agree), never by string equality; a response without ``\\boxed{}`` scores 0.

A user's reward is ``module:function``, called with (response text, the row) and returning a number in [0, 1];
the row is the data row's fields in their JSON form (``facts.splits.json_row``). The trainer imports it; the
evidence never imports code it is handed by a bundle: it re-scores with a user's function only when the reviewer
names it (``--reward module:function``) and its module's source has the SHA256 the run recorded.

Every score goes through ``checked``: a reward that raises (``SystemExit`` and ``KeyboardInterrupt`` included),
returns NaN, a non-number or a value outside [0, 1] fails the run, naming the row and the value. A number is any
real number (``numbers.Real``: numpy's scalars too) or a 0-d array or tensor, taken with ``float()``; a bool is not.
A user's function is checked before anything runs: it imports (a module that exits while imported is named so),
and ``inspect.signature(f).bind(response, row)`` fits. While it scores, a watchdog thread warns after
``STALL_WARNING_S`` that a call has not returned (naming the reward and the row), and fails the run after
``SCORE_TIMEOUT_S``, the Ray reward workers' limit too.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import inspect
import io
import math
import numbers
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# A number: optional minus, digits with optional thousands commas, optional decimals.
# Words such as "Nancy", "nan" or "inf" are not numbers.
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

GSM8K_HASH, MATH_BOXED = "gsm8k_hash", "math_boxed"
DEFAULT_REWARD = GSM8K_HASH
USER_REWARD = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
MATH_VERIFY = "math-verify"  # the distribution math_boxed compares with (its version is in the run's record)
STALL_WARNING_S = 60.0  # a user's reward call still running after this long is named on stderr
SCORE_TIMEOUT_S = 600.0  # ... and fails the run after this long (in process, and a Ray reward chunk likewise)
EXIT_GRACE_S = 30.0  # a call that the timeout cannot interrupt (stuck in C, or catching it) ends the process then


class RewardError(ValueError):
    """A reward that cannot be used (an unknown name, a function that does not import); one line naming the fix."""


class RewardValueError(RuntimeError):
    """A reward that raised or returned something other than a number in [0, 1]; the message names the row."""


def normalize_label(answer: str) -> str:
    """``answer.rsplit("####", 1)[1].strip()`` for GSM8K rationale labels; scalar labels pass as-is."""
    return answer.rsplit("####", 1)[1].strip() if "####" in answer else answer.strip()


def _to_float(text: str) -> float | None:
    text = text.replace(",", "").rstrip(".")
    try:
        return float(text)
    except ValueError:
        return None


def extract_last_number(text: str) -> float | None:
    """The numeric value of the last number in ``text``, or ``None`` when there is none."""
    matches = NUMBER.findall(text)
    return _to_float(matches[-1]) if matches else None


def math_reward(response: str, label: str) -> float:
    """``gsm8k_hash``: 1.0 when the response's last number equals the (normalised) label's value, else 0.0."""
    target = _to_float(normalize_label(label))
    predicted = extract_last_number(response)
    if target is None or predicted is None:
        return 0.0
    return 1.0 if abs(predicted - target) <= 1e-6 * max(1.0, abs(target)) else 0.0


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced; None without one."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip()
        i += 1
    return None  # an unclosed box: no answer


def math_boxed(response: str, label: str) -> float:
    """``math_boxed``: 1.0 when the last ``\\boxed{}`` of the response is mathematically equivalent to the label
    (``math_verify.verify``), else 0.0. A label may be a bare answer (``3/4``) or hold its own ``\\boxed{}``."""
    from math_verify import parse, verify  # here: only a math_boxed workload (or its audit) loads sympy

    answer = last_boxed(response)
    if answer is None or not answer:
        return 0.0
    gold_text = label if last_boxed(label) is not None else f"\\boxed{{{label.strip()}}}"
    gold, predicted = parse(gold_text), parse(f"\\boxed{{{answer}}}")
    if not gold or not predicted:
        return 0.0
    return 1.0 if verify(gold, predicted) else 0.0


def strip_label(answer: str) -> str:
    return answer.strip()


# name -> (the reward of (response, label), how a data row's answer becomes its label)
BUILTIN_REWARDS: dict[str, tuple[Callable[[str, str], float], Callable[[str], str]]] = {
    GSM8K_HASH: (math_reward, normalize_label),
    MATH_BOXED: (math_boxed, strip_label),
}


def _is_number(value) -> bool:
    """A real number (``numbers.Real``, numpy's scalars included) or a 0-d numeric array or tensor; no bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    shape, dtype = getattr(value, "shape", None), str(getattr(value, "dtype", ""))
    return shape is not None and tuple(shape) == () and "bool" not in dtype and "complex" not in dtype \
        and hasattr(value, "__float__")


def checked(value, where: str) -> float:
    """``value`` as the reward of ``where`` (``row 12 of the test split``), or ``RewardValueError``: a reward is a
    finite number in [0, 1] (module docstring: ``float()`` of a real number or a 0-d array; a bool is not one)."""
    if not _is_number(value):
        raise RewardValueError(f"the reward of {where} is {value!r} ({type(value).__name__}), not a number in [0, 1]")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise RewardValueError(f"the reward of {where} is {value!r}, outside [0, 1]")
    return number


class _Timeout(BaseException):
    """Raised in the main thread by the watchdog's signal when a user's reward call passed ``SCORE_TIMEOUT_S``."""


class _Watchdog:
    """One daemon thread timing the user's reward call in flight (a process scores one response at a time; module
    docstring): a warning on stderr after ``STALL_WARNING_S``; after ``SCORE_TIMEOUT_S`` a ``SIGALRM`` to the main
    thread, whose handler (installed where the main thread's alarm had none) raises ``_Timeout`` in the call;
    ``EXIT_GRACE_S`` later (at once off the main thread), a call still running ends the process with the cause on
    stderr (its last line, which the launcher reports). The call itself runs where it was made: a user's function
    that times itself with ``signal.alarm`` (math-verify does) needs the main thread."""

    POLL_S = 1.0

    def __init__(self):
        self._lock = threading.Lock()
        self._call: dict | None = None
        self._thread: threading.Thread | None = None

    def begin(self, name: str, where: str) -> dict:
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGALRM, _on_alarm)
        call = {"name": name, "where": where, "started": time.monotonic(), "warned": False, "timed_out": False,
                "ended": False, "main": main and signal.getsignal(signal.SIGALRM) is _on_alarm}
        with self._lock:
            self._call = call
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="reward-watchdog", daemon=True)
                self._thread.start()
        return call

    def end(self, call: dict) -> None:
        call["ended"] = True  # first: a signal handled from here on raises nothing
        with self._lock:
            if self._call is call:
                self._call = None

    def _watch(self) -> None:
        while True:
            time.sleep(self.POLL_S)
            with self._lock:
                call = self._call
            if call is not None and not call["ended"]:
                self._check(call, time.monotonic() - call["started"])

    def _check(self, call: dict, elapsed: float) -> None:
        if elapsed >= STALL_WARNING_S and not call["warned"]:
            call["warned"] = True
            print(f"proofgrid: warning: reward {call['name']} has not returned for {STALL_WARNING_S:.0f} s on "
                  f"{call['where']} (the run fails at {SCORE_TIMEOUT_S:.0f} s)", file=sys.stderr, flush=True)
        if elapsed >= SCORE_TIMEOUT_S:
            call["timed_out"] = True
            if call["main"] and elapsed < SCORE_TIMEOUT_S + EXIT_GRACE_S:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            elif elapsed >= SCORE_TIMEOUT_S + EXIT_GRACE_S or not call["main"]:
                print(f"RewardValueError: {_timeout_message(call)} (it could not be interrupted; the process ends)",
                      file=sys.stderr, flush=True)
                os._exit(1)


def _on_alarm(signum, frame) -> None:
    call = _WATCHDOG._call
    if call is not None and call["timed_out"] and not call["ended"]:
        raise _Timeout


def _timeout_message(call: dict) -> str:
    return (f"reward {call['name']} did not return within {SCORE_TIMEOUT_S:.0f} s on {call['where']}: make it "
            "faster, or give it a time limit of its own")


_WATCHDOG = _Watchdog()


@dataclass(frozen=True)
class Reward:
    """A workload's reward, ready to score: a built-in (of the label) or a user's function (of the row)."""

    name: str
    function: Callable = field(compare=False, repr=False)
    takes_row: bool = False  # a user's function: called with (response, row)
    source_sha256: str | None = None  # a user's function: its module's source, as imported

    def score(self, response: str, label: str, row: dict | None, where: str) -> float:
        """The checked reward of ``response`` (``where`` names the row in an error); a user's function is timed by
        the watchdog (module docstring)."""
        if not self.takes_row:
            return checked(self._call(response, label, where), where)
        call = _WATCHDOG.begin(self.name, where)
        try:
            try:
                value = self._call(response, row, where)
            finally:
                _WATCHDOG.end(call)
        except _Timeout:  # wherever it lands before the call is ended
            _WATCHDOG.end(call)
            raise RewardValueError(_timeout_message(call)) from None
        if call["timed_out"]:  # it returned, having caught the interruption: the limit still holds
            raise RewardValueError(_timeout_message(call))
        return checked(value, where)

    def _call(self, response: str, argument, where: str):
        # A user's function may raise anything, and exit too; a built-in's KeyboardInterrupt is the user's Ctrl-C.
        caught = (Exception, SystemExit, KeyboardInterrupt) if self.takes_row else Exception
        try:
            return self.function(response, argument)
        except caught as exc:
            if isinstance(exc, SystemExit):
                message = f"exit code {exc.code!r}: a reward returns its value, it must not exit"
            else:
                message = str(exc).splitlines()[0] if str(exc) else "(no message)"
            raise RewardValueError(f"reward {self.name} raised {type(exc).__name__} on {where}: {message}") from exc

    def normalize(self, answer: str) -> str:
        """A data row's answer as this reward's label."""
        return BUILTIN_REWARDS[self.name][1](answer) if self.name in BUILTIN_REWARDS else strip_label(answer)

    def record(self) -> dict:
        """What a run records of its reward (run.json's ``task.reward``; an evaluation's identity)."""
        if self.takes_row:
            return {"name": self.name, "source_sha256": self.source_sha256}
        if self.name == MATH_BOXED:
            return {"name": self.name, "library": f"{MATH_VERIFY} {_version(MATH_VERIFY)}"}
        return {"name": self.name}


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def is_user_reward(name: str) -> bool:
    return ":" in str(name)


def source_sha256(module) -> str | None:
    """SHA256 of the bytes of ``module``'s source file, None when it has none (a built-in or compiled module)."""
    try:
        path = inspect.getsourcefile(module)
    except TypeError:
        return None
    if path is None:
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def reward_name_problem(name) -> str | None:
    """What ``workload.reward`` must be, when ``name`` is neither a built-in nor ``module:function`` (the closest
    built-in suggested); None when it is one of them (the schema's check, and ``reward``'s)."""
    name = str(name)
    if name in BUILTIN_REWARDS or USER_REWARD.fullmatch(name):
        return None
    close = difflib.get_close_matches(name, BUILTIN_REWARDS, n=1, cutoff=0.6)
    return (f"a built-in reward ({', '.join(BUILTIN_REWARDS)}{f'; did you mean {close[0]}?' if close else ''}) or "
            "your own function as module:function")


def _import(name: str, module_name: str):
    """``module_name`` imported; ``RewardError`` when its code raises, or exits (argparse at module level), while
    imported. What it prints on stderr is held back until it imported (an argparse usage would name launch.py)."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            module = importlib.import_module(module_name)
    except (SystemExit, KeyboardInterrupt) as exc:
        code = f" {exc.code}" if isinstance(exc, SystemExit) else ""
        printed = held.getvalue().strip().splitlines()
        said = f"; it printed {printed[-1][:120]!r}" if printed else ""
        raise RewardError(f"reward {name} does not import ({type(exc).__name__}{code} while importing {module_name}"
                          f"{said}: the module runs code when imported; guard it with if __name__ == \"__main__\")") \
            from None
    except Exception as exc:  # an import runs the module's code: whatever it raises, it does not import
        absent = isinstance(exc, ModuleNotFoundError) and module_name.startswith(str(exc.name))
        fix = (f"put {module_name} on PYTHONPATH (or in the repository) and run again" if absent else
               f"fix {module_name} (it was found, and raised while imported) and run again")
        raise RewardError(f"reward {name} does not import ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}); {fix}") from None
    sys.stderr.write(held.getvalue())
    return module


def user_reward(name: str) -> Reward:
    """Import the user's ``module:function``; ``RewardError`` (one line) when it does not import, is no function or
    cannot be called with (response, row)."""
    if not USER_REWARD.fullmatch(name):
        raise RewardError(f"reward {name!r} is not {reward_name_problem(name)}")
    module_name, _, function_name = name.partition(":")
    module = _import(name, module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise RewardError(f"reward {name}: module {module_name} ({getattr(module, '__file__', '?')}) has no function "
                          f"{function_name}")
    if inspect.isclass(function):
        raise RewardError(f"reward {name} is a class, not a function: calling it makes an object, not a number; "
                          f"name a function def {function_name}(response, row) -> float")
    try:
        inspect.signature(function).bind("", {})
    except TypeError as exc:
        raise RewardError(f"reward {name} cannot be called with (response, row) ({exc}); define it as "
                          f"def {function_name}(response, row) -> float") from None
    except ValueError:  # no signature to read (some functions written in C): it is called and checked as it scores
        pass
    digest = source_sha256(module)
    if digest is None:
        raise RewardError(f"reward {name}: module {module_name} has no source file to pin; write it as a .py module")
    return Reward(name, function, takes_row=True, source_sha256=digest)


def reward(name: str) -> Reward:
    """The reward ``workload.reward`` names: a built-in, or the user's ``module:function`` imported."""
    name = str(name)
    if name in BUILTIN_REWARDS:
        return Reward(name, BUILTIN_REWARDS[name][0])
    if not is_user_reward(name):
        raise RewardError(f"reward {name!r} is not {reward_name_problem(name)}")
    return user_reward(name)
