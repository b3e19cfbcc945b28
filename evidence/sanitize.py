"""Path-free and secret-free text: one rule set, used by the sanitiser on the way into a bundle and by
the leak scan (before sealing and in the audit), so whatever the scan can find the sanitiser replaces.

The secret rules are Yelp's ``detect-secrets`` plugins (used through their public plugin API: each
plugin's ``analyze_string`` and ``denylist``), plus ``EXTRA_SECRET_RULES`` for what those plugins miss:
a private key's body and END line, cloud secret access keys, credentials embedded in URLs, bearer
tokens, webhook URLs, more providers' key shapes, and values assigned to secret-named variables.

Names are matched only where they identify someone: as a path component, in ``user@host``, as a
dot-separated part of a file name, assigned to a user/host variable, or as the whole value of a
user/host field. A user named ``seed`` or a host named ``grpo`` therefore neither rewrites the word
``seed`` elsewhere nor any JSON key. A name with a character other than a letter (``cn-042``,
``login1.hpc``, ``alice-jones``) is no ordinary word and is matched as a word anywhere.

Placeholders: ``<SWEEP_DIR>``, ``<JOB_DIR>``, ``<HOME>``, ``<PATH>`` (any other machine path),
``<USER>``, ``<HOST>``, ``<SECRET>`` (an environment secret or a credential-shaped string).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import getpass
import importlib
import io
import json
import os
import re
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from evidence.problems import Problem

RULESET = "detect-secrets 1.5.0 regex plugins + proofgrid's EXTRA_SECRET_RULES"

# detect-secrets' regex plugins (module.Class under detect_secrets.plugins). Left out: the high-entropy
# string plugins (every sha256 digest and commit id in a bundle would be a hit) and the keyword
# plugin's file-type dispatch (its config-file regexes are applied below, line by line, with spans).
DETECT_SECRETS_PLUGINS = (
    "artifactory.ArtifactoryDetector", "aws.AWSKeyDetector", "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector", "cloudant.CloudantDetector", "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector", "gitlab_token.GitLabTokenDetector", "ibm_cloud_iam.IbmCloudIamDetector",
    "ibm_cos_hmac.IbmCosHmacDetector", "ip_public.IPPublicDetector", "jwt.JwtTokenDetector",
    "mailchimp.MailchimpDetector", "npm.NpmDetector", "openai.OpenAIDetector", "private_key.PrivateKeyDetector",
    "pypi_token.PypiTokenDetector", "sendgrid.SendGridDetector", "slack.SlackDetector",
    "softlayer.SoftlayerDetector", "square_oauth.SquareOAuthDetector", "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector", "twilio.TwilioKeyDetector",
)
# Plugins whose every regex needs a keyword on the line: run only on lines that have it (speed).
_CREDENTIAL_WORD = re.compile(r"(?i)key|pwd|pw|pass|token")
_PLUGIN_TRIGGERS = {"CloudantDetector": _CREDENTIAL_WORD, "IbmCloudIamDetector": _CREDENTIAL_WORD,
                    "SoftlayerDetector": _CREDENTIAL_WORD, "IbmCosHmacDetector": re.compile(r"(?i)secret")}


@functools.cache
def _detect_secrets():
    """The plugin instances and the keyword module, imported on first use (they pull in ``requests``,
    which a launcher that only plans never needs)."""
    plugins = []
    for name in DETECT_SECRETS_PLUGINS:
        module, cls = name.rsplit(".", 1)
        plugins.append(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls)())
    keyword = importlib.import_module("detect_secrets.plugins.keyword")
    return tuple(plugins), keyword, re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)


_KEY_HEADER = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
_KEY_FOOTER = r"-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
# A line break, raw or escaped inside a JSON string.
_BREAK = r"(?:\r?\n|\\r\\n|\\n)"
# The last word of a secret-named variable (HF_TOKEN, db_password, "api_key"); "tokenizer" is not one.
_SECRET_VAR = r"(?<![A-Za-z0-9])(?:token|secret|password|passwd|passphrase|api_?key|access_?key|private_?key|credentials?)(?![A-Za-z0-9])"

# What detect-secrets misses (each pattern's first group, or the whole match, is the secret).
EXTRA_SECRET_RULES = {
    # The whole block, BEGIN to END (detect-secrets matches the BEGIN line only); without an END line,
    # the BEGIN line and the base64 (or "Proc-Type: ...") lines that follow it.
    "private key block": re.compile(
        _KEY_HEADER + r"(?:.{0,20000}?" + _KEY_FOOTER
        + r"|(?:" + _BREAK + r"(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+:[^\n\\]*))*)", re.DOTALL),
    # A body and END line whose BEGIN line was cut off (a truncated log).
    "private key body": re.compile(r"(?:[A-Za-z0-9+/=]{16,}" + _BREAK + r")*" + _KEY_FOOTER),
    "cloud secret access key": re.compile(
        r"(?i)(?:secret_?access_?key|secretaccesskey|aws_?secret(?:_?key)?)[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
    "Google API key": re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])"),
    "Hugging Face token": re.compile(r"(?<![\w-])hf_[A-Za-z0-9]{16,}"),
    "OpenAI/Anthropic-style key": re.compile(r"(?<![\w-])sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{16,}"),
    "GitHub token": re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9_]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    "Slack token": re.compile(r"(?<![\w-])xox[abeoprs]-[A-Za-z0-9-]{10,}"),
    "Stripe key": re.compile(r"(?<![\w-])[rsp]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    "credentials in a URL": re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^\s/@:\"'<>]+:[^\s/@\"'<>]+)@"),
    "secret in a URL query": re.compile(
        r"(?i)[?&](?:token|access_token|api_?key|key|sig|signature|secret|password|auth)=([^&\s\"'<>#]{8,})"),
    "webhook URL": re.compile(
        r"(?i)\bhttps?://[^\s\"'<>]*?(?:/webhooks?/|\.webhook\.office\.com/|hooks\.[a-z0-9.-]+/)[^\s\"'<>]+"),
    "bearer token": re.compile(r"(?i)\b(?:bearer|token|basic)\s+([A-Za-z0-9\-._~+/]{16,}=*)"),
    "secret assignment": re.compile(_SECRET_VAR + r"[\"']?\s*[:=]\s*[\"']?([^\s\"'&,;<>]{8,})", re.IGNORECASE),
    "JSON Web Token": re.compile(r"(?<![\w-])eyJ[\w-]{8,}\.eyJ[\w-]{4,}\.[\w-]+"),
    "GitLab token": re.compile(r"(?<![\w-])gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[\w-]{20,}"),
}
# A JSON field or CSV column named like a credential.
# A secret-named field ends with such a word ("HF_TOKEN", "db_password"); an arm named after a setting
# ("dapo-loss_reduction_token_mean") merely contains one.
_SECRET_KEY_RE = re.compile(_SECRET_VAR + r"$", re.IGNORECASE)
# A tokenizer's special tokens ("pad_token": "<|endoftext|>") are configuration, not credentials.
_TOKENIZER_FIELD = re.compile(r"(?i)(?:pad|eos|bos|unk|sep|cls|mask|start|end|stop|special|chat)_?tokens?(?![A-Za-z0-9])")
# Assignments whose value is ordinary configuration, not a credential.
_NOT_A_SECRET = re.compile(r"(?i)<[A-Z_]+>|\*+|x+|none|null|true|false|redacted|changeme|\$\{?\w+\}?|[0-9.]+")

# Environment variable names whose values are treated as secrets wherever they appear.
SECRET_NAME_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASS|CREDENTIAL", re.IGNORECASE)
# Shorter values would match ordinary text and numbers; a real credential is longer.
MIN_SECRET_LEN = 8

# Top-level directories under which an absolute path is specific to one machine, site or person:
# the usual Unix ones and the home, scratch and project layouts of common HPC centres.
MACHINE_PATH_ROOTS = (
    r"home\d*", r"root", r"tmp", r"var/tmp", r"var/folders", r"run/user", r"dev/shm", r"private",
    r"work\d*", r"scratch\d*", r"local_?scratch", r"lustre\d*", r"gpfs\d*", r"ptmp", r"project\w*",
    r"p", r"global", r"users", r"Users", r"fs", r"mnt", r"media", r"nfs", r"net", r"autofs", r"storage",
    r"data\d*", r"shared", r"opt", r"srv", r"lus", r"pfs", r"hpc", r"cluster", r"beegfs", r"nobackup",
    r"ocean", r"expanse", r"anvil", r"flash", r"appl",
)
# The lookbehind keeps relative paths ("roots/tmp/x") and URLs ("example.org/home/x") out.
# A path ends before trailing punctuation ("see /tmp/x, then" keeps its comma).
_PATH_TAIL = r"[^\s\"'<>`|]*[^\s\"'<>`|,.;:!?)\]}]"
_PATH_RE = re.compile(
    r"(?<![\w.~/-])/(?:" + "|".join(MACHINE_PATH_ROOTS) + r")/" + _PATH_TAIL
    + r"|(?<![\w/])~[a-z_][\w.-]*/" + _PATH_TAIL
    + r"|(?<![\w/])~/" + _PATH_TAIL
    + r"|\b[A-Za-z]:\\(?:Users|home)\\" + _PATH_TAIL
)

# Account and host names too generic to identify anyone, or too short to scan for.
GENERIC_NAMES = frozenset({
    "root", "user", "users", "admin", "runner", "ubuntu", "debian", "nobody", "jenkins", "ci",
    "localhost", "localhost.localdomain", "host", "node", "default", "unknown", "none",
})
MIN_NAME_LEN = 3
# Keys (JSON fields, variables) whose value names a user or a host.
NAME_KEY_RE = re.compile(
    r"(?i)(?:^|[_.-])(?:user(?:name)?|logname|login|owner|host(?:name)?|node(?:name|list)?|submit_host|addr)$")
_NAME_KEY_IN_TEXT = r"(?i:[A-Za-z0-9_.-]*(?:user(?:name)?|logname|host(?:name)?|node(?:name|list)?))"

# Joins many short texts for one pass of the rules: a line break ends every rule's match, and no rule
# matches a NUL (so no match runs on into the next text).
_SEPARATOR = "\n\x00\n"

PLACEHOLDERS = ("<SECRET>", "<SWEEP_DIR>", "<JOB_DIR>", "<HOME>", "<PATH>", "<USER>", "<HOST>")


def leak(file: str, kind: str, excerpt: str) -> Problem:
    """One leak found in a file (or its name) as a problem: what kind, and a masked excerpt safe to print."""
    return Problem(file, f"leak: {kind}: {excerpt}", kind=kind)


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    kind: str
    placeholder: str
    rank: int  # lower wins where hits overlap: secrets, then known paths, then paths, then names


# A short lowercase word ("subprocess" in PIP_KEYRING_PROVIDER) is configuration, not a credential;
# treating it as one would redact ordinary text.
_PLAIN_WORD = re.compile(r"[a-z][a-z._-]{0,14}")


def _secret_like(value: str) -> bool:
    return len(value) >= MIN_SECRET_LEN and not _PLAIN_WORD.fullmatch(value)


def _mask(value: str) -> str:
    """Show only enough of a secret to recognise its shape."""
    return value[:3] + "…" if len(value) > 3 else "…"


def _usable_name(name: str | None) -> bool:
    return bool(name) and len(name) >= MIN_NAME_LEN and name.lower() not in GENERIC_NAMES


def _distinctive(name: str) -> bool:
    """A name with a character other than a letter (``cn-042``, ``alice-jones``) is no ordinary word."""
    return not name.isalpha()


def _group_spans(match: re.Match) -> Iterator[tuple[int, int]]:
    groups = [i for i in range(1, (match.re.groups or 0) + 1) if match.group(i)]
    if not groups:
        yield match.span()
    for i in groups:
        yield match.span(i)


def _lines_with(text: str, trigger: re.Pattern[str]) -> list[tuple[int, str]]:
    """(offset, line) of every line holding a match of ``trigger``: slow rules run on those lines only."""
    starts: dict[int, str] = {}
    for match in trigger.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start not in starts:
            end = text.find("\n", match.end())
            starts[start] = text[start:] if end < 0 else text[start:end + 1]
    return sorted(starts.items())


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """A match without the delimiters some plugins include (Artifactory's ``(?:\\s|=|:|"|^)``)."""
    while start < end and text[start] in " \t\r\n\"=:":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"":
        end -= 1
    return start, end


def _plugin_hits(text: str) -> Iterator[_Hit]:
    """detect-secrets' regex plugins: the values each plugin reports, located by its own denylist. A
    group shorter than a credential (``ghp`` in ``(ghp|gho)_...``) is a prefix: the whole match is taken."""
    for plugin in _detect_secrets()[0]:
        trigger = _PLUGIN_TRIGGERS.get(type(plugin).__name__)
        pieces = [(0, text)] if trigger is None else _lines_with(text, trigger)
        for offset, piece in pieces:
            values = set(plugin.analyze_string(piece))
            if not values:
                continue
            for regex in plugin.denylist:
                for match in regex.finditer(piece):
                    for start, end in _group_spans(match):
                        if piece[start:end] in values:
                            if end - start < MIN_SECRET_LEN:
                                start, end = match.span()
                            start, end = _trimmed(piece, start, end)
                            yield _Hit(offset + start, offset + end, plugin.secret_type, "<SECRET>", 1)


def _keyword_hits(text: str) -> Iterator[_Hit]:
    """detect-secrets' keyword rules (``password: x``, ``api_key = "x"``), line by line: they match once per line."""
    _, keyword, trigger = _detect_secrets()
    for offset, line in _lines_with(text, trigger):
        for regex, group in keyword.CONFIG_DENYLIST_REGEX_TO_GROUP.items():
            for match in regex.finditer(line):
                value = match.group(group)
                if value and len(value) >= 4 and not _NOT_A_SECRET.fullmatch(value.strip()):
                    yield _Hit(offset + match.start(group), offset + match.end(group), "secret keyword", "<SECRET>", 1)


def _extra_hits(text: str) -> Iterator[_Hit]:
    for kind, pattern in EXTRA_SECRET_RULES.items():
        for match in pattern.finditer(text):
            for start, end in _group_spans(match):
                if kind in ("secret assignment", "bearer token") and _NOT_A_SECRET.fullmatch(text[start:end]):
                    continue
                if kind == "secret assignment" and _TOKENIZER_FIELD.search(text, max(0, match.start() - 24),
                                                                           match.start() + 6):
                    continue
                yield _Hit(start, end, kind, "<SECRET>", 0)


def _name_patterns(names: Iterable[str]) -> list[re.Pattern[str]]:
    """A name where it identifies someone (see the module docstring); group 1 is the name."""
    names = sorted(set(names), key=len, reverse=True)
    if not names:
        return []
    alt = "(" + "|".join(re.escape(n) for n in names) + ")"
    contexts = [
        r"(?<=/)" + alt + r"(?=/|[^\w.-]|$)",                       # a whole path component
        r"(?<![\w.-])" + alt + r"(?=@[\w-])",                        # user@...
        r"(?<=[\w-]@)" + alt + r"(?![\w-])",                         # ...@host
        r"(?<=[\w-]\.)" + alt + r"(?=\.[\w-])",                      # events.out.tfevents.<t>.<host>.<pid>
        r"(?<![\w.-])" + _NAME_KEY_IN_TEXT + r"[\"']?\s*[:=]\s*[\"']?" + alt + r"(?![\w-])",  # USER=name
    ]
    distinctive = [n for n in names if _distinctive(n)]
    if distinctive:
        contexts.append(r"(?<![\w-])(" + "|".join(re.escape(n) for n in distinctive) + r")(?![\w-])")
    return [re.compile(c, re.MULTILINE) for c in contexts]


def _json_strings(node, field: str = "") -> Iterator[tuple[str, str, bool]]:
    """Every key and string value of a JSON value in document order, as ``(text, field, is_key)``: the
    field of a value is the key it sits under (a list's items inherit their list's key)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k), str(k), True
            yield from _json_strings(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _json_strings(v, field)
    elif isinstance(node, str):
        yield node, field, False


@dataclass
class Sanitizer:
    """Replaces machine paths, user and host names and secrets with placeholders; scans for leftovers.

    ``literals`` maps exact strings (a sweep directory, a job directory, a home directory) to
    their placeholders; they win over the generic path pattern so that the more informative
    placeholder is used.
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

    def _hits(self, text: str) -> list[_Hit]:
        """Every rule's hits in ``text``, overlapping ones resolved by rank then position."""
        hits: list[_Hit] = []
        for value, name in self.secrets.items():
            start = text.find(value)
            while start >= 0:
                hits.append(_Hit(start, start + len(value), f"secret value ${name}", "<SECRET>", 0))
                start = text.find(value, start + 1)
        hits += _plugin_hits(text)
        hits += _keyword_hits(text)
        hits += _extra_hits(text)
        literal = self._literal_re()
        if literal is not None:
            hits += [_Hit(*m.span(), "machine path", self.literals[m.group(0)], 2) for m in literal.finditer(text)]
        hits += [_Hit(*m.span(), "absolute machine path", "<PATH>", 3) for m in _PATH_RE.finditer(text)]
        for names, kind, placeholder in ((self.users, "user name", "<USER>"), (self.hosts, "host name", "<HOST>")):
            for pattern in _name_patterns(names):
                hits += [_Hit(*m.span(1), kind, placeholder, 4) for m in pattern.finditer(text)]
        chosen: list[_Hit] = []
        taken: list[tuple[int, int]] = []
        for hit in sorted(hits, key=lambda h: (h.rank, h.start, -h.end)):
            if hit.end > hit.start and not any(hit.start < e and s < hit.end for s, e in taken):
                chosen.append(hit)
                taken.append((hit.start, hit.end))
        return sorted(chosen, key=lambda h: h.start)

    def clean(self, text: str) -> str:
        """The text with every secret, known path, machine path, user and host name replaced."""
        for _ in range(4):  # a replacement can expose a new context; a fixed point comes fast
            hits = self._hits(text)
            if not hits:
                break
            parts, last = [], 0
            for hit in hits:
                parts += [text[last:hit.start], hit.placeholder]
                last = hit.end
            text = "".join(parts) + text[last:]
        return text

    def scan(self, text: str, file: str = "") -> list[Problem]:
        """Every leak in the text (of ``file``, or its name); excerpts of secrets are masked."""
        leaks = []
        for hit in self._hits(text):
            value = text[hit.start:hit.end]
            if hit.kind.startswith("secret value $"):  # name the variable it came from
                leaks.append(leak(file, "secret value", f"{hit.kind.split()[-1]} ({_mask(value)})"))
            else:
                leaks.append(leak(file, hit.kind, _mask(value) if hit.placeholder == "<SECRET>" else value))
        return list(dict.fromkeys(leaks))

    # ---- structured values: names are also matched as the whole value of a user/host field ----------

    def _whole_name(self, value: str) -> str | None:
        for names, placeholder in ((self.users, "<USER>"), (self.hosts, "<HOST>")):
            for name in names:
                if value == name or value.startswith(name + "."):
                    return placeholder + value[len(name):]
        return None

    def _whole_value(self, value: str, key: str) -> str | None:
        """The replacement of a value by its field alone, or None. Under a secret-named key (``password``,
        ``HF_TOKEN``) a credential-like value is replaced whole; under a user/host key (``node``,
        ``SLURMD_NODENAME``) a known name is."""
        if (_SECRET_KEY_RE.search(key) and not _TOKENIZER_FIELD.search(key) and len(value) >= 4
                and not _NOT_A_SECRET.fullmatch(value)):
            return "<SECRET>"
        if NAME_KEY_RE.search(key):
            return self._whole_name(value)
        return None

    def clean_value(self, value: str, key: str = "") -> str:
        """A string value of field ``key`` sanitised (see ``_whole_value``), else by the text rules."""
        whole = self._whole_value(value, key)
        return self.clean(value) if whole is None else whole

    def _clean_many(self, texts: list[str]) -> list[str]:
        """``[clean(t) for t in texts]``, in one pass over the joined texts (each rule call costs more than
        its text is long). The separator is one no rule crosses; if one did, each text is cleaned alone."""
        if len(texts) < 2:
            return [self.clean(t) for t in texts]
        cleaned = self.clean(_SEPARATOR.join(texts)).split(_SEPARATOR)
        return cleaned if len(cleaned) == len(texts) else [self.clean(t) for t in texts]

    def clean_json(self, value, key: str = ""):
        """A JSON value with every string sanitised: keys by the text rules only (a key is never a name),
        values also by their field (``_whole_value``)."""
        texts = [text for text, under, is_key in _json_strings(value, key)
                 if is_key or self._whole_value(text, under) is None]
        cleaned = iter(self._clean_many(texts))

        def rebuild(node, field: str):
            if isinstance(node, dict):
                return {next(cleaned): rebuild(v, str(k)) for k, v in node.items()}
            if isinstance(node, list):
                return [rebuild(v, field) for v in node]
            if isinstance(node, str):
                whole = self._whole_value(node, field)
                return next(cleaned) if whole is None else whole
            return node

        return rebuild(value, key)

    def _scan_json(self, value, file: str) -> list[Problem]:
        """The leaks that ``clean_json`` replaces: every key and value by the text rules, in one pass over
        the joined strings, and the values that their field alone makes a leak."""
        texts: list[str] = []
        leaks: list[Problem] = []
        for text, under, is_key in _json_strings(value, ""):
            if is_key or self._whole_value(text, under) is None:
                texts.append(text)
            elif _SECRET_KEY_RE.search(under):
                leaks.append(leak(file, "secret-named field", f"{under}={_mask(text)}"))
            else:
                leaks.append(leak(file, "host or user name", f"{under}={text}"))
        return leaks + self.scan(_SEPARATOR.join(texts), file)

    def scan_document(self, name: str, text: str) -> list[Problem]:
        """Every leak in a file's text; a JSON file is scanned as ``clean_json`` cleans it (value by value,
        so that a user/host field's whole value counts), a CSV file also cell by cell under its header."""
        if name.endswith(".json"):
            try:
                return list(dict.fromkeys(self._scan_json(json.loads(text), name)))
            except (ValueError, RecursionError):
                pass
        leaks = self.scan(text, name)
        if name.endswith(".csv"):
            rows = list(csv.reader(io.StringIO(text)))
            header = rows[0] if rows else []
            for row in rows[1:]:
                for column, cell in zip(header, row):
                    if self._whole_value(cell, column) is not None:
                        leaks.append(leak(name, "host or user name", f"{column}={cell}"))
        return list(dict.fromkeys(leaks))


def strip_abs_keys(value):
    """Drop every mapping key ending in ``_abs`` (absolute paths, by the run-directory contract)."""
    if isinstance(value, dict):
        return {k: strip_abs_keys(v) for k, v in value.items() if not str(k).endswith("_abs")}
    if isinstance(value, list):
        return [strip_abs_keys(v) for v in value]
    return value
