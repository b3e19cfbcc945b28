"""Path-free and secret-free text: the sanitiser used on the way into a bundle, and the leak scan.

Both share one set of patterns so that whatever the scan can find, the sanitiser has already
replaced; the scan still runs before sealing (and in the audit) as the safety net.

Placeholders: ``<SWEEP_DIR>``, ``<JOB_DIR>``, ``<HOME>``, ``<PATH>`` (any other machine path),
``<USER>``, ``<HOST>``, ``<SECRET>`` (an environment secret or a token-shaped string).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Top-level directories under which an absolute path is specific to one machine or person.
MACHINE_PATH_ROOTS = (
    "home", "root", "tmp", "work", "scratch", "mnt", "media", "Users", "gpfs", "lustre", "nfs",
    "private", "var/folders", "var/tmp", "run/user", "data", "project", "projects", "storage",
    "opt", "srv", "shared", "dev/shm",
)
# The lookbehind keeps relative paths ("roots/tmp/x") and URLs ("example.org/home/x") out.
# A path ends before trailing punctuation ("see /tmp/x, then" keeps its comma).
_PATH_TAIL = r"[^\s\"'<>`|]*[^\s\"'<>`|,.;:!?)\]}]"
_PATH_RE = re.compile(
    r"(?<![\w.~/-])/(?:" + "|".join(re.escape(r) for r in MACHINE_PATH_ROOTS) + r")/" + _PATH_TAIL
    + r"|(?<![\w/])~/" + _PATH_TAIL
    + r"|\b[A-Za-z]:\\(?:Users|home)\\" + _PATH_TAIL
)

# Environment variable names whose values are treated as secrets.
SECRET_NAME_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASS|CREDENTIAL", re.IGNORECASE)
# Shorter values would match ordinary text and numbers; a real credential is longer.
MIN_SECRET_LEN = 8

# Common credential shapes. A 40-hex wandb key is not listed: it cannot be told from a git commit.
TOKEN_SHAPES = {
    "Hugging Face token": re.compile(r"(?<![\w-])hf_[A-Za-z0-9]{16,}"),
    "OpenAI-style key": re.compile(r"(?<![\w-])sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"),
    "GitHub token": re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    "Slack token": re.compile(r"(?<![\w-])xox[abprs]-[A-Za-z0-9-]{10,}"),
    "AWS access key": re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])"),
    "private key block": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}

# Account and host names too generic to identify anyone, or too short to scan for as words.
GENERIC_NAMES = frozenset({
    "root", "user", "users", "admin", "runner", "ubuntu", "debian", "nobody", "jenkins", "ci",
    "localhost", "localhost.localdomain", "host", "node", "default", "unknown", "none",
})
MIN_NAME_LEN = 3


@dataclass(frozen=True)
class Leak:
    """One leak found in a text: what kind, and a masked excerpt safe to print."""

    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.excerpt}"


# A short lowercase word ("subprocess" in PIP_KEYRING_PROVIDER) is configuration, not a credential;
# treating it as one would redact ordinary text.
_PLAIN_WORD = re.compile(r"[a-z][a-z._-]{0,14}")


def _secret_like(value: str) -> bool:
    return len(value) >= MIN_SECRET_LEN and not _PLAIN_WORD.fullmatch(value)


def _mask(value: str) -> str:
    """Show only enough of a secret to recognise its shape."""
    return value[:3] + "…" if len(value) > 3 else "…"


def _word_re(words: Iterable[str]) -> re.Pattern[str] | None:
    words = sorted(set(words), key=len, reverse=True)
    if not words:
        return None
    # Dots count as boundaries: a host name inside "events.out.tfevents.<time>.<host>.<pid>" is a leak.
    return re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in words) + r")(?![\w-])")


def _usable_name(name: str | None) -> bool:
    return bool(name) and len(name) >= MIN_NAME_LEN and name.lower() not in GENERIC_NAMES


@dataclass
class Sanitizer:
    """Replaces machine paths, user and host names and secrets with placeholders; scans for leftovers.

    ``literals`` maps exact strings (a sweep directory, a job directory, a home directory) to
    their placeholders; they are replaced before the generic path pattern so that the more
    informative placeholder wins.
    """

    literals: dict[str, str] = field(default_factory=dict)
    users: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    secrets: dict[str, str] = field(default_factory=dict)  # value -> variable name

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str] | None = None,
        literals: Mapping[str, str] | None = None,
        hosts: Iterable[str] = (),
        users: Iterable[str] = (),
    ) -> Sanitizer:
        """A sanitiser for this machine: its user, host, home directory and secret env values."""
        env = os.environ if env is None else env
        found_users = {env.get("USER", ""), env.get("LOGNAME", ""), *users}
        # No passwd entry in some containers: the environment's names then suffice.
        with contextlib.suppress(Exception):
            found_users.add(getpass.getuser())
        host = socket.gethostname()
        found_hosts = {host, host.split(".")[0], *hosts}
        found_hosts |= {h.split(".")[0] for h in hosts if h}
        lits = dict(literals or {})
        home = env.get("HOME", "")
        if len(home) > 1:
            lits.setdefault(home.rstrip("/"), "<HOME>")
        secrets = {value: name for name, value in env.items() if SECRET_NAME_RE.search(name) and _secret_like(value)}
        return cls(
            literals=lits,
            users={u for u in found_users if _usable_name(u)},
            hosts={h for h in found_hosts if _usable_name(h)},
            secrets=secrets,
        )

    def _literal_re(self) -> re.Pattern[str] | None:
        # A literal path counts only as a whole path component: "/root" must not eat "/roots".
        literals = sorted((lit for lit in self.literals if lit), key=len, reverse=True)
        if not literals:
            return None
        return re.compile(r"(?<![\w.-])(?:" + "|".join(map(re.escape, literals)) + r")(?![\w.-])")

    def clean(self, text: str) -> str:
        """The text with every secret, known path, machine path, user and host name replaced."""
        for value in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(value, "<SECRET>")
        for pattern in TOKEN_SHAPES.values():
            text = pattern.sub("<SECRET>", text)
        pattern = self._literal_re()
        if pattern is not None:
            text = pattern.sub(lambda m: self.literals[m.group(0)], text)
        text = _PATH_RE.sub("<PATH>", text)
        for words, placeholder in ((self.users, "<USER>"), (self.hosts, "<HOST>")):
            pattern = _word_re(words)
            if pattern is not None:
                text = pattern.sub(placeholder, text)
        return text

    def scan(self, text: str) -> list[Leak]:
        """Every leak in the text; excerpts of secrets are masked."""
        leaks: list[Leak] = []
        for value, name in self.secrets.items():
            if value in text:
                leaks.append(Leak("secret value", f"${name} ({_mask(value)})"))
        for kind, pattern in TOKEN_SHAPES.items():
            leaks += [Leak(kind, _mask(m.group(0))) for m in pattern.finditer(text)]
        pattern = self._literal_re()
        if pattern is not None:
            leaks += [Leak("machine path", m.group(0)) for m in pattern.finditer(text)]
        leaks += [Leak("absolute machine path", m.group(0)) for m in _PATH_RE.finditer(text)]
        for words, kind in ((self.users, "user name"), (self.hosts, "host name")):
            pattern = _word_re(words)
            if pattern is not None:
                leaks += [Leak(kind, m.group(0)) for m in pattern.finditer(text)]
        return list(dict.fromkeys(leaks))


def strip_abs_keys(value):
    """Drop every mapping key ending in ``_abs`` (absolute paths, by the run-directory contract)."""
    if isinstance(value, dict):
        return {k: strip_abs_keys(v) for k, v in value.items() if not str(k).endswith("_abs")}
    if isinstance(value, list):
        return [strip_abs_keys(v) for v in value]
    return value
