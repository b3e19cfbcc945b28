"""Path-free and secret-free text: one rule set, used by the sanitiser on the way into a bundle and by
the leak scan (before sealing and in the audit), so whatever the scan can find the sanitiser replaces.

The secret rules are Yelp's ``detect-secrets`` plugins (used through their public plugin API: each
plugin's ``analyze_string`` and ``denylist``), plus ``EXTRA_SECRET_RULES`` for what those plugins miss:
a private key's body and END line, cloud secret access keys (also a bare one beside its key id or after
an aws/secret word), netrc entries' login and password, bearer tokens, webhook URLs, more providers' key
shapes, and credentials by their structure (issue 33): a secret value runs to the end of its value, never
to the next punctuation (quoted: to its closing quote; bare: to the next white space; a configuration
line's or an HTTP header's: to the line's end). The structures: a secret-named variable, key or field
(``MLFLOW_TRACKING_PASSWORD=...``, ``"password": "..."``, ``password: ...``); a URL's whole userinfo
(``https://user:pass@host``, ``https://TOKEN@host``; a service account's ``git@`` is none); a URL query or
fragment parameter one of whose name's parts is a credential word (``X-Amz-Signature``,
``X-Goog-Credential``, ``sig``, ``access_token``: ``SECRET_NAME_PARTS``), to the next ``&``; a credential
header (``Authorization``, ``Cookie``, ``X-Api-Key``); a command line's credential option (``--password=x``,
``--hf-token x``, ``--api-key 'x y'``: ``SECRET_OPTION_PARTS``), also where the command line is a list (a job's
argv in a JSON record, or such a list written out in a log line): the item after the option
(``command_line_secrets``). A value that is configuration (``none``, a
number, ``${VAR}``, a placeholder) and a tokenizer's settings (``pad_token``) are none.

Names are matched only where they identify someone: as a path component, in ``user@host``, as a
dot-separated part of a file name, assigned to a user/host variable, or as the whole value of a
user/host field. A user named ``seed`` or a host named ``grpo`` therefore neither rewrites the word
``seed`` elsewhere nor any JSON key. A name with a character other than a letter (``cn-042``,
``login1.hpc``, ``alice-jones``) is no ordinary word and is matched as a word anywhere.

Machine paths are a class, not a list of layouts. An absolute path is the machine's when
  (a) it carries a user or host name the sanitiser knows (``$USER``, ``$LOGNAME``, the login name,
      ``$HOSTNAME``, the host's own name, the job records' nodes) anywhere in it, as a part bounded by
      characters other than letters and digits (``/pscratch/sd/a/alice/x``, ``/fsx/alice_runs/x``,
      ``/lfs/nid001234/tmp``), whatever the site's layout;
  (b) it is, or lies under, a directory of the machine that built (or audits) the bundle: the sweep and
      job directories, the repository, ``sys.prefix`` (and the base and exec prefixes), ``$HOME`` as given
      and resolved, the temporary directories and the working directory (``machine_directories``);
      shared system directories (``/``, ``/usr``, ``/usr/local``, ``/opt``, ...) are no one's and do not
      count;
  (c) it is any other absolute path of two or more components, whatever its layout (``/fsx/jdoe/x``,
      ``/Volumes/jdoe-ssd/x``: another person's path carries no name we know), in POSIX, Windows drive
      (``D:\\data\\x``), UNC (``\\\\server\\share\\x``), ``file://`` and percent-encoded (``%2Ffsx%2Fx``)
      form, or ``~/...``, ``~user/...``; except under a shared system location (``SYSTEM_PATH_PREFIXES``:
      ``/usr/lib/python3...``, ``/proc``, ``/dev/null``, ...), a short allow-list that names no one. A POSIX
      path has a path's shape: one of its components holds two letters in a row (a name); ``/2/4``,
      ``/*/+`` and ``/x/y`` in a model's arithmetic are none.
A path of (a) or (c), and one of (b) without a placeholder of its own, is replaced whole by ``<PATH>``
(its remaining parts would still say which site and which person); a directory of (b) with one keeps
the part below it (``<SWEEP_DIR>/jobs/x``). A path starts at a ``/`` that follows no letter, digit,
``.``, ``~``, ``-`` or ``/`` and is not ``//`` (relative paths ``data/runs/x``, metric names
``train/loss`` and URLs ``https://host/alice/x`` are no machine paths; ``file:///...`` is).

E-mail addresses (``first.last@example.edu``) are replaced by ``<EMAIL>``: a local part, ``@``, and a
domain whose labels start with a letter and whose last label is two or more letters (``pass@1``,
``pass@4.mean``, ``@dataclass`` and Hydra's ``group@pkg.key=...`` are none). The local part of a service
account (``git@github.com:org/repo.git``, ``GENERIC_NAMES``) names no one: a git remote stays readable;
``alice@github.com`` is an address (and ``alice``, a known user, a name).

Placeholders: ``<SWEEP_DIR>``, ``<JOB_DIR>``, ``<HOME>``, ``<REPO>``, ``<PYTHON>``, ``<PATH>`` (any other
machine path), ``<USER>``, ``<HOST>``, ``<EMAIL>``, ``<SECRET>`` (an environment secret or a
credential-shaped string).
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import functools
import getpass
import hashlib
import importlib
import io
import json
import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from evidence.problems import Problem
from facts.bundle_layout import verbatim_member
from facts.files import BUNDLE_PAYLOAD
from facts.machine import HOST_NAME_VARIABLES, USER_NAME_VARIABLES
from facts.repo import REPO_ROOT

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


@dataclass(frozen=True)
class Anchor:
    """A necessary condition of one rule, cheap to test on a whole text: every match of the rule
    contains one of ``words`` (matched with the rule's own ``flags``) followed at once by a match of
    ``then``, or, given a ``pattern`` instead, a match of that. A rule whose anchors are all absent from
    a text cannot match it and is skipped: the hits are exactly the rule's own, found at a few ns per
    character instead of tens (an alternation, a leading look-behind or a case-insensitive word is tried
    at every position by the regex engine; ``str``'s own search is not).

    Case-insensitive words and patterns are searched in the lower-cased text when the text is ASCII (the
    engine's ``re.IGNORECASE`` then matches exactly the ASCII case variants), else with the engine, which
    also equates ``ſ`` with ``s``, ``K`` (Kelvin) with ``k`` and ``ı`` with ``i``."""

    words: tuple[str, ...] = ()
    flags: int = 0
    then: str = ""
    pattern: str = ""

    def __post_init__(self) -> None:
        folds = bool(self.flags & re.IGNORECASE)
        if folds and (any(w != w.lower() or not w.isascii() for w in self.words) or self.pattern != self.pattern.lower()):
            raise ValueError(f"a case-insensitive anchor is written in lower-case ASCII: {self}")
        object.__setattr__(self, "_folds", folds)
        object.__setattr__(self, "_words", tuple(re.compile(re.escape(w), self.flags) for w in self.words))
        object.__setattr__(self, "_then", re.compile(self.then, self.flags) if self.then else None)
        object.__setattr__(self, "_pattern", re.compile(self.pattern, self.flags) if self.pattern else None)
        object.__setattr__(self, "_ascii_pattern", re.compile(self.pattern) if self.pattern and folds else None)

    def found_in(self, text: str, lowered: str | None = None) -> bool:
        """Whether the anchor occurs in ``text``; ``lowered``: ``text.lower()`` when ``text`` is ASCII."""
        fast = lowered if self._folds else text  # what str's search may read, or None: the engine only
        if self._pattern is not None:
            if fast is not None and self._ascii_pattern is not None:
                return self._ascii_pattern.search(fast) is not None
            return self._pattern.search(text) is not None
        if fast is not None:
            for word in self.words:
                at = fast.find(word)
                while at >= 0:
                    if self._then is None or self._then.match(text, at + len(word)):
                        return True
                    at = fast.find(word, at + 1)  # overlapping occurrences too
            return False
        for word in self._words:
            match = word.search(text)
            while match is not None:
                if self._then is None or self._then.match(text, match.end()):
                    return True
                match = word.search(text, match.start() + 1)
        return False


def lowered_ascii(text: str) -> str | None:
    """``text.lower()`` for an ASCII text (what the anchors' fast search reads), else None."""
    return text.lower() if text.isascii() else None


def _anchored(anchors: tuple[Anchor, ...] | None, text: str, lowered: str | None) -> bool:
    """Whether a rule with these anchors may match ``text`` (no anchors: always)."""
    return anchors is None or any(anchor.found_in(text, lowered) for anchor in anchors)


# detect-secrets' plugins, anchored where their regexes cost more than a few ns per character; each
# anchor is a part every one of the plugin's regexes (``plugin.denylist``) requires. They were read off
# the regexes whose digest is beside them and are used only while the installed plugin has exactly
# those regexes (``_plugin_anchors``): other regexes run unanchored, which is slower and as exact.
PLUGIN_ANCHORS: dict[str, tuple[str, tuple[Anchor, ...]]] = {
    # (?:\s|=|:|"|^)AKC[a-zA-Z0-9]{10,}... and ...AP[\dABCDEF][a-zA-Z0-9]{8,}...
    "ArtifactoryDetector": ("73b07f367f5237ad", (Anchor(("AKC", "AP")),)),
    # (?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}, and (?i)aws.{0,20}?(?:key|...)...
    "AWSKeyDetector": ("71a8df27f70e9634", (Anchor(("A3T", "ABIA", "ACCA", "AKIA", "ASIA")),
                                            Anchor(("aws",), re.IGNORECASE))),
    # (?i)...(?:cloudant|cl|clou)(?:_|-|)(?:api|)(?:key|pwd|pw|password|pass|token)..., and
    # (?i)(?:https?\:\/\/)[\w\-]+\:(...)\@[\w\-]+\.cloudant\.com
    "CloudantDetector": ("b6a1216beb142a1f", (Anchor(pattern=r"cl(?:oudant|ou)?[_-]?(?:api)?(?:key|pw|pass|token)",
                                                     flags=re.IGNORECASE),
                                              Anchor((".cloudant.com",), re.IGNORECASE))),
    # (?i)...(?:key|pwd|password|pass|token)(?:"|\'|)(?:\]|)(?: *)(?:=|:|:=|=>| +|::)...
    "IbmCloudIamDetector": ("fc0bf3786c5eb2a1", (Anchor(("key", "pwd", "password", "pass", "token"), re.IGNORECASE,
                                                        then=r"[\"']?\]? *[=: ]"),)),
    # (?i)...(?:secret[-_]?(?:access)?[-_]?key)...
    "IbmCosHmacDetector": ("59503c343fe889d3", (Anchor(("secret",), re.IGNORECASE),)),
    # four octets: (?:25[0-5]|...|[0-9])\. three times, then a last octet
    "IPPublicDetector": ("3ad9c91a5b1d5faa", (Anchor(pattern=r"[0-9]\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]"),)),
    # [0-9a-z]{32}-us[0-9]{1,2}
    "MailchimpDetector": ("dee1cfb51abb80c2", (Anchor(("-us",)),)),
    # (?i)xox(?:a|b|p|o|s|r)-..., and (?ix)https://hooks\.slack\.com/services/...
    "SlackDetector": ("008b349b833e2e41", (Anchor(("xox", "hooks.slack.com"), re.IGNORECASE),)),
    # (?i)...(?:softlayer|sl)(?:_|-|)(?:api|)(?:_|-|)(?:key|pwd|password|pass|token)..., and
    # (?i)(?:http|https)://api.softlayer.com/soap/...
    "SoftlayerDetector": ("d6802c56a266746b", (Anchor(pattern=r"sl(?:oftlayer)?[_-]?(?:api)?[_-]?(?:key|pw|pass|token)",
                                                      flags=re.IGNORECASE),
                                               Anchor(("://api",), re.IGNORECASE))),
    # \d{8,10}:[0-9A-Za-z_-]{35}
    "TelegramBotTokenDetector": ("b3a83412d0c30407", (Anchor(pattern=r"\d:[0-9A-Za-z_-]{35}"),)),
}


def plugin_patterns_digest(plugin) -> str:
    """The first 16 hex digits of the SHA256 of a plugin's regexes and their flags, in order."""
    text = "\n".join(f"{regex.flags}:{regex.pattern}" for regex in plugin.denylist)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plugin_anchors(plugin) -> tuple[Anchor, ...] | None:
    """The plugin's anchors while its regexes are the ones they were read off; else None (unanchored)."""
    digest, anchors = PLUGIN_ANCHORS.get(type(plugin).__name__, ("", None))
    return anchors if anchors is not None and plugin_patterns_digest(plugin) == digest else None


@functools.cache
def _detect_secrets():
    """The plugin instances and the keyword module, imported on first use (they pull in ``requests``,
    which a launcher that only plans never needs); each plugin with its anchors (or None)."""
    plugins = []
    for name in DETECT_SECRETS_PLUGINS:
        module, cls = name.rsplit(".", 1)
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls)()
        plugins.append((plugin, _plugin_anchors(plugin)))
    keyword = importlib.import_module("detect_secrets.plugins.keyword")
    return tuple(plugins), keyword, re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)


# Every alternative of detect-secrets' keyword DENYLIST_REGEX (api_?key, db_?pass, password, pwd, secret,
# contraseña, ...) holds one of these; its config regexes all start with that alternation.
_KEYWORD_ANCHORS = (Anchor(("key", "pass", "pwd", "secret", "contrase"), re.IGNORECASE),)


_KEY_HEADER = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
_KEY_FOOTER = r"-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
# A line break, raw or escaped inside a JSON string.
_BREAK = r"(?:\r?\n|\\r\\n|\\n)"
# The last word of a secret-named variable (HF_TOKEN, db_password, "api_key"); "tokenizer" is not one.
_SECRET_VAR = (r"(?:(?<![A-Za-z0-9])(?:token|secret|password|passwd|passphrase|pwd|api_?key|access_?key|private_?key"
               r"|credentials?)|(?<=_)pass)(?![A-Za-z0-9])")
# A credential's value runs to the end of the value, never to the next punctuation (``Tr0ub4dor&3xyz``,
# ``p;a,s.s``): quoted, to its closing quote (an escaped quote inside kept); bare, to the next white space.
# A bare value starts with no ``<`` (a placeholder already put there) and no ``-`` (the next option of a
# command line), and ends with no ``:`` or ``=`` (``password: passwd: 'x'``: that is the next key).
_VALUE = r"""(?:"((?:[^"\\\n]|\\.){1,2000})"|'([^'\n]{1,2000})'|([^\s"'<>\-][^\s"']*+)(?<![:=]))"""
# The words that make a URL's query (or fragment) parameter, an HTTP header or a command-line option a
# credential, as one part of its name: X-Amz-Signature, X-Goog-Credential, sig, access_token, apiKey.
SECRET_NAME_PARTS = frozenset({"signature", "sig", "credential", "credentials", "token", "secret", "password",
                               "passwd", "pwd", "pass", "passphrase", "key", "apikey", "auth", "authorization",
                               "session", "sessionid", "jwt", "sas", "cookie"})
# Option names (their last part) that make a command line's next value a credential.
SECRET_OPTION_PARTS = frozenset({"password", "passwd", "pwd", "passphrase", "token", "secret", "credential",
                                 "credentials", "apikey"})

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
    # The whole userinfo of a URL (``https://user:pass@host``, ``https://TOKEN@host``): to the last ``@`` before
    # the host (a raw ``@`` in a password too), never past the authority (a ``/``, ``?`` or ``#``).
    "credentials in a URL": re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://([^\s/?#\"'<>@]+(?:@[^\s/?#\"'<>@]+)*)@(?=[\w\[])"),
    # A query or fragment parameter whose name has a credential word as one of its parts (SECRET_NAME_PARTS,
    # decided in ``_extra_hits``): its value, to the next ``&``, ``#`` or the end of the URL.
    "secret in a URL query": re.compile(r"[?&#;]([A-Za-z][\w.-]{0,60})=([^&#\s\"'<>]+)"),
    "webhook URL": re.compile(
        r"(?i)\bhttps?://[^\s\"'<>]*?(?:/webhooks?/|\.webhook\.office\.com/|hooks\.[a-z0-9.-]+/)[^\s\"'<>]+"),
    # An HTTP header carrying a credential (Authorization, Proxy-Authorization, Cookie, X-Api-Key,
    # X-Amz-Security-Token): its whole value, to the end of the line or the closing quote.
    "credential header": re.compile(
        r"(?i)(?<![\w-])((?:proxy-)?authorization|set-cookie|cookie|x-[\w-]*?(?:key|token|auth|secret|signature|session)"
        r"[\w-]*)[\"']?\s*:\s*(?:\"([^\"\n]+)\"|'([^'\n]+)'|([^\s\"'<][^\n\"']*[^\s\"',]|[^\s\"',<]))"),
    # On one line: a table cell "token" (algo.mis_level) ending its row is no scheme before the next row's first cell.
    "bearer token": re.compile(r"(?i)\b(?:bearer|token|basic)[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)"),
    # A secret-named variable, field or key (HF_TOKEN=..., "password": "...", db_pass: ...): its whole value.
    "secret assignment": re.compile(_SECRET_VAR + r"[\"']?\s*(?:=|:(?!//))\s*" + _VALUE, re.IGNORECASE),
    # A configuration file's line (YAML, INI) setting a secret-named key: an unquoted value runs to the line's end.
    "secret line": re.compile(r"(?im)^[ \t]*(?:-[ \t]+)?(?:[A-Za-z0-9_.][\w.-]*?)?" + _SECRET_VAR
                              + r"[ \t]*:[ \t]+([^\s\"'<#][^\n]*?)[ \t]*(?:[ \t]#[^\n]*)?$"),
    # A command line's credential option, ``--password=x``, ``--hf-token x``, ``--api-key 'x y'``: its value; also
    # as two items of a list written out (``"--password", "x"``, a JSON or Python list in a log line), whose
    # value is no option (``"--token", "--next"`` are two options).
    "secret option": re.compile(r"(?<![\w-])--?((?:[A-Za-z0-9]+[-_])*[A-Za-z0-9]+)(?:=|[ \t]+"
                                r"|\"[ \t]*,[ \t]*(?=\"(?!-))|'[ \t]*,[ \t]*(?='(?!-)))"
                                + _VALUE),
    # netrc form (``machine api.wandb.ai login jdoe password ...``, on one line or several): each value.
    "netrc credentials": re.compile(
        r"(?i)(?<![\w-])(?:machine\s+\S+|default)(?:\s+(?:port|protocol)\s+\S+)*"
        + r"\s+(?:login|password|account)\s+(\S+)" + r"(?:\s+(?:login|password|account)\s+(\S+))?" * 2),
    # A bare 40-character AWS secret access key beside its key id, or after an aws/secret word
    # (``aws_secret wJalr...``, ``secret: wJalr...``); a 40-hex commit id is none (see ``_extra_hits``).
    "AWS secret access key": re.compile(
        r"(?:(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}[\s,:;=\"'|]{1,8}"
        + r"|(?i:(?<![A-Za-z0-9])(?:aws|secret)[\w.-]{0,30}[\"']?(?:\s*[:=]\s*|\s+)[\"']?))"
        + r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
    "JSON Web Token": re.compile(r"(?<![\w-])eyJ[\w-]{8,}\.eyJ[\w-]{4,}\.[\w-]+"),
    "GitLab token": re.compile(r"(?<![\w-])gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[\w-]{20,}"),
}
# What each of those rules requires (see ``Anchor``).
_ASSIGNMENT_ANCHORS = (Anchor(("token", "secret", "password", "passwd", "passphrase", "pwd", "_pass", "api_key", "apikey",
                               "access_key", "accesskey", "private_key", "privatekey"),
                              re.IGNORECASE, then=r"(?![A-Za-z0-9])[\"']?\s*[:=]"),
                       Anchor(("credential",), re.IGNORECASE, then=r"s?(?![A-Za-z0-9])[\"']?\s*[:=]"))
EXTRA_RULE_ANCHORS: dict[str, tuple[Anchor, ...]] = {
    "private key block": (Anchor(("-----BEGIN",)),),
    "private key body": (Anchor(("-----END",)),),
    "cloud secret access key": (Anchor(("secret",), re.IGNORECASE),),
    "Google API key": (Anchor(("AIza",)),),
    "Hugging Face token": (Anchor(("hf_",)),),
    "OpenAI/Anthropic-style key": (Anchor(("sk-",)),),
    "GitHub token": (Anchor(("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),),
    "Slack token": (Anchor(("xox",)),),
    "Stripe key": (Anchor(("k_live_", "k_test_")),),
    "credentials in a URL": (Anchor(("://",)),),
    "secret in a URL query": (Anchor(("?", "&", "#"), then=r"[A-Za-z][\w.-]{0,60}="),),
    "webhook URL": (Anchor(("://",)),),
    "credential header": (Anchor(("authorization", "cookie", "x-"), re.IGNORECASE),),
    "bearer token": (Anchor(("bearer", "token", "basic"), re.IGNORECASE, then=r"[ \t]"),),
    "secret assignment": _ASSIGNMENT_ANCHORS,
    "secret line": _ASSIGNMENT_ANCHORS,
    "secret option": (Anchor(("password", "passwd", "pwd", "passphrase", "token", "secret", "credential", "apikey",
                              "api-key", "api_key", "access-key", "access_key", "private-key", "private_key"),
                             re.IGNORECASE, then=r"s?(?:=|[ \t]|[\"'][ \t]*,)"),),
    "netrc credentials": (Anchor(("machine", "default"), re.IGNORECASE, then=r"\s"),),
    "AWS secret access key": (Anchor(("aws", "secret"), re.IGNORECASE), Anchor(("A3T", "AKIA", "ASIA", "ABIA", "ACCA"))),
    "JSON Web Token": (Anchor(("eyJ",)),),
    "GitLab token": (Anchor(("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-",
                             "gloas-")),),
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

# Machine paths are a class (the module docstring's (c)): any absolute path of two or more components
# is someone's, whatever its layout, unless it lies under one of these shared system locations, which
# every machine has and which name no one (a traceback's /usr/lib/python3.11/os.py, /proc/self/status,
# /dev/null). A small allow-list of system prefixes, not a list of user layouts.
SYSTEM_PATH_PREFIXES = (
    r"usr/(?:local/)?(?:lib\d*|libexec|share|bin|sbin|include|src)", r"usr/local/cuda[\w.-]*",
    r"bin", r"sbin", r"lib\d*", r"etc", r"proc", r"sys", r"dev(?!/shm/)",
)
_SYSTEM = r"(?!(?:" + "|".join(SYSTEM_PATH_PREFIXES) + r")/)"
# A path ends before trailing punctuation ("see /tmp/x, then" keeps its comma).
_PATH_TAIL = r"[^\s\"'<>`|]*[^\s\"'<>`|,.;:!?)\]}]"
# One component of a path (no separator, no space or quote).
_COMPONENT = r"[^/\\\s\"'<>`|%]+"
# The look-behind keeps relative paths ("roots/tmp/x") and URLs ("example.org/home/x") out; file:// is in.
_PATH_RE = re.compile(
    r"(?:(?<![\w.~/-])|(?<=file://))/" + _SYSTEM + _COMPONENT + r"/" + _PATH_TAIL      # POSIX, 2+ components
    + r"|(?<![\w/])~[a-z_][\w.-]*/" + _PATH_TAIL
    + r"|(?<![\w/])~/" + _PATH_TAIL
    + r"|(?<![\w\\])[A-Za-z]:(?:\\\\|\\|/)" + _COMPONENT + r"[\\/]" + _PATH_TAIL       # D:\data\x, C:/x/y
    + r"|(?<![\w\\])\\\\(?:\\\\)?[\w$-][\w.$-]*\\\\?" + _PATH_TAIL   # \\server\share\x (UNC)
    + r"|(?i:(?<![\w%])%2F(?!%2F)[^%\s\"'<>&]+%2F)[^\s\"'<>&|`]*[^\s\"'<>&|`,.;:!?)\]}]"  # %2Fa%2Fb
)
# Each branch's part: a "/" after no path character, "~", a drive's ":", a UNC's "\\", a "%2F".
_PATH_ANCHORS = (Anchor(pattern=r"(?:^|[^\w.~/-])/[^/\s]"), Anchor(("~", ":\\", ":/", "\\\\", "file://")),
                 Anchor(("%2f",), re.IGNORECASE))
# Any absolute path (class (a) and (b) of the module docstring): a "/" that follows no path character
# (or follows "file://") and starts no "//" (a URL's authority).
_ABS_PATH_RE = re.compile(r"(?:(?<![\w.~/-])|(?<=file://))/(?![/\s])" + _PATH_TAIL)
# Two letters in a row: a POSIX path names something (a directory, a person); ``/2/4``, ``/*/+`` name nothing.
_NAME_IN_PATH = re.compile(r"[A-Za-z]{2}")


def _path_shaped(path: str) -> bool:
    """Whether a match of ``_PATH_RE`` has a path's shape: a POSIX one (starting with ``/``) holds a name."""
    return not path.startswith("/") or _NAME_IN_PATH.search(path) is not None


# Directories every machine has: no one's, so no path under them is the machine's for that reason alone.
SHARED_SYSTEM_DIRS = frozenset({
    "/", "/usr", "/usr/local", "/usr/lib", "/usr/lib64", "/usr/share", "/usr/bin", "/bin", "/sbin", "/lib",
    "/lib64", "/etc", "/var", "/opt", "/opt/conda", "/proc", "/sys", "/dev",
})

# An e-mail address: group 1 the local part (a service account's is no one's, see GENERIC_NAMES).
_EMAIL_RE = re.compile(r"(?<![\w.+%-])([A-Za-z0-9][\w.+%-]*)@(?:[A-Za-z][\w-]*\.)+[A-Za-z]{2,}(?![\w-])(?!=)")
_EMAIL_ANCHORS = (Anchor(("@",)),)

# Account and host names too generic to identify anyone, or too short to scan for.
GENERIC_NAMES = frozenset({
    "root", "user", "users", "admin", "runner", "ubuntu", "debian", "nobody", "jenkins", "ci",
    "localhost", "localhost.localdomain", "host", "node", "default", "unknown", "none",
})
# The local parts of addresses that are service accounts, not people (``git@github.com:org/repo``).
SERVICE_ACCOUNTS = GENERIC_NAMES | {"git", "hg", "svn", "noreply", "no-reply"}
MIN_NAME_LEN = 3
# Keys (JSON fields, variables) whose value names a user or a host.
NAME_KEY_RE = re.compile(
    r"(?i)(?:^|[_.-])(?:user(?:name)?|logname|login|owner|host(?:name)?|node(?:name|list)?|submit_host|addr)$")
_NAME_KEY_IN_TEXT = r"(?i:[A-Za-z0-9_.-]*(?:user(?:name)?|logname|host(?:name)?|node(?:name|list)?))"

# Joins many short texts for one pass of the rules: a line break ends every rule's match, and no rule
# matches a NUL (so no match runs on into the next text).
_SEPARATOR = "\n\x00\n"

SECRET_PLACEHOLDER = "<SECRET>"
PLACEHOLDERS = (SECRET_PLACEHOLDER, "<SWEEP_DIR>", "<JOB_DIR>", "<HOME>", "<REPO>", "<PYTHON>", "<PATH>", "<USER>",
                "<HOST>", "<EMAIL>")


# The leak kinds only this machine's identity makes: its secrets' values and its named directories (the sweep, the
# jobs, home, the repository, Python's prefix). In a file sealed byte for byte as a model wrote it or a dataset holds
# it (``facts.bundle_layout.VERBATIM_TEXT``) they still refuse the seal; any other kind there (an address, a path of a
# layout no one here has, a credential's shape, a word that is also a name) is the model's or the data's text, not
# this machine's: a note, and the file is sealed as written (one response must not block a sweep's seal).
MACHINE_LEAK_KINDS = frozenset({"secret value", "machine path"})


def payload_findings(rel: str, problems: list[Problem]) -> tuple[list[Problem], list[Problem]]:
    """``(leaks, notes)`` of the leak scan's ``problems`` in the bag's file ``rel`` (``data/...``): every problem is a
    leak, but in a verbatim file (a model's responses, a dataset's subset) only ``MACHINE_LEAK_KINDS`` are."""
    payload = rel.removeprefix(f"{BUNDLE_PAYLOAD}/")
    if payload == rel or not verbatim_member(payload):
        return list(problems), []
    return ([p for p in problems if p.kind in MACHINE_LEAK_KINDS],
            [p for p in problems if p.kind not in MACHINE_LEAK_KINDS])


def payload_note(note: Problem) -> str:
    """How a build and an audit say a note of ``payload_findings``."""
    return f"{note} (a model's response or the dataset's text, sealed as written)"


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


def _group_spans(match: re.Match, skip: int = 0) -> Iterator[tuple[int, int]]:
    """The spans of the match's non-empty groups after the first ``skip`` (the whole match when it has none)."""
    groups = [i for i in range(1 + skip, (match.re.groups or 0) + 1) if match.group(i)]
    if not groups:
        yield match.span()
    for i in groups:
        yield match.span(i)


def _non_overlapping(hits: list[_Hit]) -> list[_Hit]:
    """The hits kept where they overlap (by rank, then position, the longer first), in text order.

    The kept spans are disjoint, so sorted by start their ends are sorted too: a new span overlaps one
    iff the last kept span starting before its end ends after its start (one bisection, not a walk of
    every kept span: a text can hold thousands of hits, a job path each)."""
    chosen: list[_Hit] = []
    starts: list[int] = []
    ends: list[int] = []
    for hit in sorted(hits, key=lambda h: (h.rank, h.start, -h.end)):
        if hit.end <= hit.start:
            continue
        at = bisect.bisect_left(starts, hit.end)
        if at and ends[at - 1] > hit.start:
            continue
        chosen.append(hit)
        starts.insert(at, hit.start)
        ends.insert(at, hit.end)
    return sorted(chosen, key=lambda h: h.start)


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


def _plugin_hits(text: str, lowered: str | None) -> Iterator[_Hit]:
    """detect-secrets' regex plugins: the values each plugin reports, located by its own denylist. A
    group shorter than a credential (``ghp`` in ``(ghp|gho)_...``) is a prefix: the whole match is taken."""
    for plugin, anchors in _detect_secrets()[0]:
        if not _anchored(anchors, text, lowered):
            continue
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


def _keyword_hits(text: str, lowered: str | None) -> Iterator[_Hit]:
    """detect-secrets' keyword rules (``password: x``, ``api_key = "x"``), line by line: they match once per line."""
    _, keyword, trigger = _detect_secrets()
    if not _anchored(_KEYWORD_ANCHORS, text, lowered):
        return
    for offset, line in _lines_with(text, trigger):
        for regex, group in keyword.CONFIG_DENYLIST_REGEX_TO_GROUP.items():
            for match in regex.finditer(line):
                value = match.group(group)
                if value and len(value) >= 4 and not _NOT_A_SECRET.fullmatch(value.strip()):
                    yield _Hit(offset + match.start(group), offset + match.end(group), "secret keyword", "<SECRET>", 1)


# A commit id or SHA-1 digest: 40 lower-case hex digits, no secret key.
_HEX_DIGEST = re.compile(r"[0-9a-f]{40}")


# The rules whose first group is a name (a URL parameter's, a header's, an option's) that decides whether the
# value (the other groups) is a credential.
_NAMED_RULES = ("secret in a URL query", "credential header", "secret option")
# A name's parts: split at "-", "_", "." and where a lower-case letter meets an upper-case one (apiKey).
_NAME_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def name_parts(name: str) -> list[str]:
    """``X-Amz-Signature`` -> ``[x, amz, signature]``, ``apiKey`` -> ``[api, key]``, lower-cased."""
    return [part.lower() for part in _NAME_PART.findall(name)]


def credential_name(kind: str, name: str) -> bool:
    """Whether the name of a URL parameter or header (any of its parts is a credential word) or of a command
    line's option (its last part, or its last two run together: ``--api-key``) makes its value a credential.
    A tokenizer's settings (``--pad-token``) are none."""
    parts = name_parts(name)
    if not parts or _TOKENIZER_FIELD.search(name.replace("-", "_")):
        return False
    if kind == "secret option":
        return parts[-1] in SECRET_OPTION_PARTS or "".join(parts[-2:]) in {"apikey", "accesskey", "secretkey",
                                                                          "privatekey"}
    return kind == "credential header" or any(part in SECRET_NAME_PARTS for part in parts)


# An item of a command line that is an option's name (``--api-key``, ``-p``, ``-5``), without a value of its own.
_OPTION_ITEM = re.compile(r"--?((?:[A-Za-z0-9]+[-_])*[A-Za-z0-9]+)")
# A trainer spec's placeholder (``{trainer.api_key}``): where a value goes, no value.
_SPEC_PLACEHOLDER = re.compile(r"\{[\w.]+\}")


def working_directory(option: str, value: str) -> bool:
    """Whether a secret-named option's value is a directory it names, not a credential: a bare ``--pwd`` given an
    absolute path (``apptainer exec --pwd /dir``: the directory to start in). ``--pwd hunter2`` and ``--db-pwd
    /x`` stay credentials."""
    return name_parts(option) == ["pwd"] and value.startswith("/")


def command_line_secrets(items) -> set[int]:
    """The positions of a list's items that are credentials by where they stand, the list read as a command line
    (a job's argv, a spec's command, any JSON list): the item after a secret-named option (``--password``,
    ``--api-key``: the "secret option" rule's names, ``credential_name``), unless it is itself an option (as
    argparse reads it), configuration (``_NOT_A_SECRET``) or a spec's placeholder. One item ``--password=x`` is
    the text rules' (as the same text on a line is). The sanitiser, the launcher's public records
    (``launcher.job_records.public_copy``) and the leak scan all ask this."""
    found = set()
    for i in range(1, len(items)):
        option, value = items[i - 1], items[i]
        if not (isinstance(option, str) and isinstance(value, str) and value):
            continue
        name = _OPTION_ITEM.fullmatch(option)
        if name and credential_name("secret option", name.group(1)) and not _OPTION_ITEM.fullmatch(value) \
                and not _NOT_A_SECRET.fullmatch(value) and not _SPEC_PLACEHOLDER.fullmatch(value) \
                and not working_directory(name.group(1), value):
            found.add(i)
    return found


def _extra_hits(text: str, lowered: str | None) -> Iterator[_Hit]:
    for kind, pattern in EXTRA_SECRET_RULES.items():
        if not _anchored(EXTRA_RULE_ANCHORS.get(kind), text, lowered):
            continue
        named = kind in _NAMED_RULES
        for match in pattern.finditer(text):
            if named and not credential_name(kind, match.group(1)):
                continue
            for start, end in _group_spans(match, skip=1 if named else 0):
                if kind == "netrc credentials" and "password" not in match.group(0).lower():
                    break  # "machine learning login page": a netrc entry has a password
                if kind in _VALUE_RULES and _NOT_A_SECRET.fullmatch(text[start:end]):
                    continue
                if kind == "secret option" and working_directory(match.group(1), text[start:end]):
                    continue
                if kind == "credentials in a URL" and text[start:end].lower() in SERVICE_ACCOUNTS:
                    continue  # git+ssh://git@github.com/org/x: a service account, no one's credential
                if kind == "AWS secret access key" and _HEX_DIGEST.fullmatch(text, start, end):
                    continue
                if kind in ("secret assignment", "secret line") and \
                        _TOKENIZER_FIELD.search(text, max(0, match.start() - 24), match.start() + 6):
                    continue
                if kind == "secret assignment" and _in_a_query(text, match.start()):
                    break  # ?X-Amz-Credential=...&: a URL's parameter, whose value ends at "&" (the query rule's)
                yield _Hit(start, end, kind, "<SECRET>", 0)


def _in_a_query(text: str, at: int) -> bool:
    """Whether the name that ends in the word at ``at`` is a URL's query or fragment parameter's."""
    start = at
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start -= 1
    return start > 0 and text[start - 1] in "?&#"


# Rules whose value may be ordinary configuration (``token: none``, ``--password ${DB_PASSWORD}``).
_VALUE_RULES = ("secret assignment", "secret line", "bearer token", "netrc credentials", *_NAMED_RULES)


def _paths_holding(text: str, rule: re.Pattern[str], kind: str) -> list[_Hit]:
    """Every absolute path in ``text`` holding a match of ``rule`` (a name, a directory), whole; only
    the lines with such a match are read."""
    hits = []
    for offset, line in _lines_with(text, rule):
        for path in _ABS_PATH_RE.finditer(line):
            if rule.search(path.group(0)) and not _after_placeholder(line, path.start()):
                hits.append(_Hit(offset + path.start(), offset + path.end(), kind, "<PATH>", 3))
    return hits


# A placeholder (``<SWEEP_DIR>``, the launcher's ``<PORT:name>``) right before a "/": the path goes on from it.
_PLACEHOLDER_END = re.compile(r"<[A-Z][A-Z0-9_]*(?::[\w.-]+)?>\Z")


def _after_placeholder(text: str, at: int) -> bool:
    """Whether the path at ``at`` is the rest of a path whose start was replaced (``<SWEEP_DIR>/jobs/x``)."""
    return at > 0 and text[at - 1] == ">" and _PLACEHOLDER_END.search(text, max(0, at - 48), at) is not None


# Variables naming temporary directories (the system's and the schedulers' per-job ones).
TEMP_DIR_VARIABLES = ("TMPDIR", "TMP", "TEMP", "XDG_RUNTIME_DIR", "SLURM_TMPDIR", "PBS_TMPDIR", "LOCAL_SCRATCH")


def _own_directory(path: str) -> bool:
    """Whether ``path`` is an absolute directory specific enough to be this machine's (not ``/usr``)."""
    return path.startswith("/") and os.path.normpath(path) not in SHARED_SYSTEM_DIRS


def _forms(path: str) -> set[str]:
    """A directory as given and resolved (a symlinked home, ``/tmp`` -> ``/private/tmp``), without ``/`` at the end."""
    forms = {os.path.normpath(path)}
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        forms.add(os.path.realpath(path))
    return {form for form in forms if _own_directory(form)}


def machine_directories(env: Mapping[str, str]) -> tuple[dict[str, str], set[str]]:
    """This machine's directories (class (b) of the module docstring): those with a placeholder (home,
    the repository, the Python prefixes), as literals, and the others (temporary and working
    directories), whose paths are replaced whole. Each as given and resolved."""
    named: dict[str, str] = {}
    for path, placeholder in ((sys.prefix, "<PYTHON>"), (sys.exec_prefix, "<PYTHON>"), (sys.base_prefix, "<PYTHON>"),
                              (str(REPO_ROOT), "<REPO>"), (env.get("HOME", ""), "<HOME>")):
        for form in _forms(path) if path else ():
            named[form] = placeholder  # later wins: a home that is also a prefix's parent is <HOME>
    directories: set[str] = set()
    for path in (tempfile.gettempdir(), os.getcwd(), *(env.get(name, "") for name in TEMP_DIR_VARIABLES)):
        if path and path.startswith("/"):
            directories |= _forms(path)
    return named, directories - set(named)


def _alternation(words: Iterable[str]) -> str:
    """A regex matching what ``(?:w1|w2|...)`` with the words longest first matches, as a trie: at each
    character one branch can go on, so a match costs its length, not the number of words (thousands of
    job directories, hundreds of node names). A word that ends where a longer one goes on makes the rest
    optional, tried first: the longest word that lets the rest of the pattern match wins, as it does in
    the longest-first alternation."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def branch(node: dict) -> str:
        ends = "" in node
        arms = [re.escape(char) + branch(child) for char, child in sorted(node.items()) if char]
        if not arms:
            return ""
        body = arms[0] if len(arms) == 1 else "(?:" + "|".join(arms) + ")"
        return f"(?:{body})?" if ends else body

    return branch(trie)


def _name_patterns(names: Iterable[str]) -> list[re.Pattern[str]]:
    """A name where it identifies someone (see the module docstring); group 1 is the name."""
    names = sorted(set(names), key=len, reverse=True)
    if not names:
        return []
    alt = "(" + _alternation(names) + ")"
    contexts = [
        r"(?<=/)" + alt + r"(?=/|[^\w.-]|$)",                       # a whole path component
        r"(?<![\w.-])" + alt + r"(?=@[\w-])",                        # user@...
        r"(?<=[\w-]@)" + alt + r"(?![\w-])",                         # ...@host
        r"(?<=[\w-]\.)" + alt + r"(?=\.[\w-])",                      # events.out.tfevents.<t>.<host>.<pid>
        r"(?<![\w.-])" + _NAME_KEY_IN_TEXT + r"[\"']?\s*[:=]\s*[\"']?" + alt + r"(?![\w-])",  # USER=name
    ]
    distinctive = [n for n in names if _distinctive(n)]
    if distinctive:
        contexts.append(r"(?<![\w-])(" + _alternation(distinctive) + r")(?![\w-])")
    return [re.compile(c, re.MULTILINE) for c in contexts]


@functools.lru_cache(maxsize=4096)
def _field_kind(key: str) -> tuple[bool, bool]:
    """Whether a field named ``key`` is secret-named (not a tokenizer's setting) and whether it is
    user/host-named: what ``Sanitizer._whole_value`` asks of every value's key (a bundle has a few
    hundred distinct keys and columns, and millions of cells under them)."""
    return bool(_SECRET_KEY_RE.search(key) and not _TOKENIZER_FIELD.search(key)), bool(NAME_KEY_RE.search(key))


# The roles of a JSON value's strings (``_json_strings``).
_KEY, _VALUE_ITEM, _OPTION_VALUE = "key", "value", "option value"


def _json_strings(node, field: str = "") -> Iterator[tuple[str, str, str]]:
    """Every key and string value of a JSON value in document order, as ``(text, field, role)``: the field of a
    value is the key it sits under (a list's items inherit their list's key); the role is ``_KEY``, ``_VALUE_ITEM``
    or ``_OPTION_VALUE``, a list's item that is a credential by its place (``command_line_secrets``: its field
    then names the option, ``argv[7] after --api-key``)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k), str(k), _KEY
            yield from _json_strings(v, str(k))
    elif isinstance(node, list):
        secret = command_line_secrets(node)
        for i, v in enumerate(node):
            if i in secret:
                yield v, f"{field}[{i}] after {node[i - 1]}", _OPTION_VALUE
            else:
                yield from _json_strings(v, field)
    elif isinstance(node, str):
        yield node, field, _VALUE_ITEM


# scan_document's leaks by (sanitiser's rules, file name, SHA256 of the text): a build's seal and the audit after
# it, an archive and its directory, or the two bundles of a comparison read the same files again.
_SCANNED: dict[tuple[bytes, str, bytes], tuple[Problem, ...]] = {}
_SCANNED_MAX = 8192


@dataclass(frozen=True)
class Sanitizer:
    """Replaces machine paths, user and host names and secrets with placeholders; scans for leftovers.

    ``literals`` maps exact strings (a sweep directory, a job directory, a home directory) to
    their placeholders; they win over the generic path pattern so that the more informative
    placeholder is used. ``directories``: the machine's own directories without a placeholder (its
    temporary and working directories): a path under one is replaced whole by ``<PATH>``, as is any
    absolute path that carries one of ``users`` or ``hosts`` (see the module docstring).
    """

    literals: dict[str, str] = field(default_factory=dict)
    users: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    secrets: dict[str, str] = field(default_factory=dict)  # value -> variable name
    directories: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        # The rules of these fields, compiled once: a sweep's thousand job directories and its nodes' names
        # are one trie each, anchored by itself. The fields are frozen with them (a literal added afterwards
        # would be in no rule: another sanitiser, dataclasses.replace, is how to add one).
        for name, frozen in (("literals", MappingProxyType(dict(self.literals))), ("users", frozenset(self.users)),
                             ("hosts", frozenset(self.hosts)), ("secrets", MappingProxyType(dict(self.secrets))),
                             ("directories", frozenset(self.directories))):
            object.__setattr__(self, name, frozen)
        literals = [lit for lit in self.literals if lit]
        literal_rule = None
        if literals:
            # A literal path counts only as a whole path component: "/root" must not eat "/roots".
            alternation = _alternation(literals)
            literal_rule = (re.compile(r"(?<![\w.-])(?:" + alternation + r")(?![\w.-])"),
                            (Anchor(pattern=alternation),))
        object.__setattr__(self, "_literal_rule", literal_rule)
        object.__setattr__(self, "_name_rules", [])
        for names, kind, placeholder in ((self.users, "user name", "<USER>"), (self.hosts, "host name", "<HOST>")):
            if names:
                self._name_rules.append((_name_patterns(names), kind, placeholder, (Anchor(pattern=_alternation(names)),)))
        # Absolute paths that are the machine's by what they carry (a name) or where they lie (a
        # directory): looked for only on the lines that hold a name or a directory.
        object.__setattr__(self, "_path_rules", [])
        names = sorted({n.lower() for n in (*self.users, *self.hosts) if n})
        if names:
            alternation = _alternation(names)
            self._path_rules.append((re.compile(r"(?<![A-Za-z0-9])(?:" + alternation + r")(?![A-Za-z0-9])", re.IGNORECASE),
                                     "path with a user or host name", (Anchor(pattern=alternation, flags=re.IGNORECASE),)))
        directories = sorted({d.rstrip("/") for d in self.directories if _own_directory(d)})
        if directories:
            alternation = _alternation(directories)
            self._path_rules.append((re.compile(r"(?<![\w.~-])(?:" + alternation + r")(?![\w.-])"),
                                     "path of this machine", (Anchor(pattern=alternation),)))
        # Everything the rules above were made from (the module's own rules are fixed): the scan memo's key.
        object.__setattr__(self, "_fingerprint", hashlib.sha256(repr((
            sorted(self.literals.items()), sorted(self.users), sorted(self.hosts), sorted(self.secrets.items()),
            sorted(self.directories))).encode()).digest())

    @classmethod
    def from_environment(
        cls,
        env: Mapping[str, str] | None = None,
        literals: Mapping[str, str] | None = None,
        hosts: Iterable[str] = (),
        users: Iterable[str] = (),
    ) -> Sanitizer:
        """A sanitiser for this machine: its user and host names (``$USER``, ``$LOGNAME``, ``$SLURM_JOB_USER``, the
        login name; ``$HOSTNAME``, ``$SLURMD_NODENAME``, ``$SLURM_SUBMIT_HOST``, the host's own name:
        ``facts.machine``), its directories (``machine_directories``) and secret env values; ``literals`` win
        over its own. ``hosts`` and ``users``: more names (the job records', what the jobs' runtimes recorded)."""
        env = os.environ if env is None else env
        found_users = {*(env.get(name, "") for name in USER_NAME_VARIABLES), *users}
        # No passwd entry in some containers: the environment's names then suffice.
        with contextlib.suppress(Exception):
            found_users.add(getpass.getuser())
        found_hosts = {socket.gethostname(), *(env.get(name, "") for name in HOST_NAME_VARIABLES), *hosts}
        found_hosts |= {h.split(".")[0] for h in found_hosts if h}
        named, directories = machine_directories(env)
        lits = {**named, **(literals or {})}
        secrets = {value: name for name, value in env.items() if SECRET_NAME_RE.search(name) and _secret_like(value)}
        return cls(
            literals=lits,
            users={u for u in found_users if _usable_name(u)},
            hosts={h for h in found_hosts if _usable_name(h)},
            secrets=secrets,
            directories=directories,
        )

    def _hits(self, text: str) -> list[_Hit]:
        """Every rule's hits in ``text``, overlapping ones resolved by rank then position."""
        hits: list[_Hit] = []
        for value, name in self.secrets.items():
            start = text.find(value)
            while start >= 0:
                hits.append(_Hit(start, start + len(value), f"secret value ${name}", "<SECRET>", 0))
                start = text.find(value, start + 1)
        lowered = lowered_ascii(text)
        hits += _plugin_hits(text, lowered)
        hits += _keyword_hits(text, lowered)
        hits += _extra_hits(text, lowered)
        if self._literal_rule is not None and _anchored(self._literal_rule[1], text, lowered):
            hits += [_Hit(*m.span(), "machine path", self.literals[m.group(0)], 2)
                     for m in self._literal_rule[0].finditer(text)]
        if _anchored(_PATH_ANCHORS, text, lowered):
            hits += [_Hit(*m.span(), "absolute machine path", "<PATH>", 3) for m in _PATH_RE.finditer(text)
                     if not _after_placeholder(text, m.start()) and _path_shaped(m.group(0))]
        for rule, kind, anchors in self._path_rules:
            if _anchored(anchors, text, lowered):
                hits += _paths_holding(text, rule, kind)
        if _anchored(_EMAIL_ANCHORS, text, lowered):
            hits += [_Hit(*m.span(), "e-mail address", "<EMAIL>", 3) for m in _EMAIL_RE.finditer(text)
                     if m.group(1).lower() not in SERVICE_ACCOUNTS]
        for patterns, kind, placeholder, anchors in self._name_rules:
            if _anchored(anchors, text, lowered):
                for pattern in patterns:
                    hits += [_Hit(*m.span(1), kind, placeholder, 4) for m in pattern.finditer(text)]
        return _non_overlapping(hits)

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
        secret_named, name_named = _field_kind(key)
        if secret_named and len(value) >= 4 and not _NOT_A_SECRET.fullmatch(value):
            return "<SECRET>"
        if name_named:
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

    def clean_rows(self, rows: list[dict]) -> list[dict]:
        """Each row (a CSV row: column -> cell) with every string cell sanitised as ``clean_value`` does,
        the cells that their column does not decide cleaned in one pass (``_clean_many``)."""
        texts = [v for row in rows for k, v in row.items() if isinstance(v, str) and self._whole_value(v, k) is None]
        cleaned = iter(self._clean_many(texts))

        def cell(value, column: str):
            if not isinstance(value, str):
                return value
            whole = self._whole_value(value, column)
            return next(cleaned) if whole is None else whole

        return [{k: cell(v, k) for k, v in row.items()} for row in rows]

    def scan_names(self, names: list[str]) -> list[list[Problem]]:
        """``[scan(name, name) for name in names]`` (file names in a bundle): one scan of them all, and
        each alone only when that finds something (a clean whole has clean parts: the separator is one
        no rule crosses, see ``_clean_many``)."""
        if len(names) > 1 and not self.scan(_SEPARATOR.join(names)):
            return [[] for _ in names]
        return [self.scan(name, name) for name in names]

    def clean_json(self, value, key: str = ""):
        """A JSON value with every string sanitised: keys by the text rules only (a key is never a name),
        values also by their field (``_whole_value``), a list's items also by their place (``command_line_secrets``)."""
        texts = [text for text, under, role in _json_strings(value, key)
                 if role == _KEY or (role == _VALUE_ITEM and self._whole_value(text, under) is None)]
        cleaned = iter(self._clean_many(texts))

        def rebuild(node, field: str):
            if isinstance(node, dict):
                return {next(cleaned): rebuild(v, str(k)) for k, v in node.items()}
            if isinstance(node, list):
                secret = command_line_secrets(node)
                return [SECRET_PLACEHOLDER if i in secret else rebuild(v, field) for i, v in enumerate(node)]
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
        for text, under, role in _json_strings(value, ""):
            if role == _OPTION_VALUE:
                leaks.append(leak(file, "secret option value", f"{under}: {_mask(text)}"))
            elif role == _KEY or self._whole_value(text, under) is None:
                texts.append(text)
            elif _field_kind(under)[0]:
                leaks.append(leak(file, "secret-named field", f"{under}={_mask(text)}"))
            else:
                leaks.append(leak(file, "host or user name", f"{under}={text}"))
        return leaks + self.scan(_SEPARATOR.join(texts), file)

    def scan_document(self, name: str, text: str) -> list[Problem]:
        """Every leak in a file's text; a JSON file is scanned as ``clean_json`` cleans it (value by value,
        so that a user/host field's whole value counts), a CSV file also cell by cell under its header.
        A text this sanitiser scanned before under the same name is not scanned again (``_SCANNED``)."""
        key = (self._fingerprint, name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        if key not in _SCANNED:
            if len(_SCANNED) >= _SCANNED_MAX:
                _SCANNED.pop(next(iter(_SCANNED)))  # the oldest
            _SCANNED[key] = tuple(self._scan_document(name, text))
        return list(_SCANNED[key])

    def _scan_document(self, name: str, text: str) -> list[Problem]:
        if name.endswith(".json"):
            try:
                return list(dict.fromkeys(self._scan_json(json.loads(text), name)))
            except (ValueError, RecursionError):
                pass
        leaks = self.scan(text, name)
        if name.endswith(".csv"):
            rows = list(csv.reader(io.StringIO(text)))
            header = rows[0] if rows else []
            # Only a column that a value's field can decide (secret- or name-named) is read cell by cell.
            decided = [(i, column) for i, column in enumerate(header) if any(_field_kind(column))]
            for row in rows[1:] if decided else ():
                for i, column in decided:
                    if i < len(row) and self._whole_value(row[i], column) is not None:
                        leaks.append(leak(name, "host or user name", f"{column}={row[i]}"))
        return list(dict.fromkeys(leaks))


def strip_abs_keys(value):
    """Drop every mapping key ending in ``_abs`` (absolute paths, by the run-directory contract)."""
    if isinstance(value, dict):
        return {k: strip_abs_keys(v) for k, v in value.items() if not str(k).endswith("_abs")}
    if isinstance(value, list):
        return [strip_abs_keys(v) for v in value]
    return value
