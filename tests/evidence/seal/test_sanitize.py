"""The sanitiser and leak scan on plain text, and the package's import boundary."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import evidence
from evidence.seal.sanitize import Sanitizer, strip_abs_keys

ENV = {
    "HOME": "/home/alice", "USER": "alice", "HF_TOKEN": "hf_" + "a1B2c3" * 5,
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "PIP_KEYRING_PROVIDER": "subprocess", "PASS": "1",
}


def test_replacements_and_what_is_left_alone():
    clean = Sanitizer.from_environment(env=ENV, literals={"/scratch/j/sweep": "<SWEEP_DIR>"}, hosts=["gpu-node-17"])
    text = (f"token {ENV['HF_TOKEN']} key {ENV['WANDB_API_KEY']} at /scratch/j/sweep/jobs and /home/alice/x, "
            "user alice on gpu-node-17.cluster, ssh alice@gpu-node-17; ghp_" + "Z" * 36 + " sk-" + "q" * 40
            + " | roots/tmp/ray https://example.org/home/page Nancy nan inf subprocess 1 commit 5f7cd574")
    out = clean.clean(text)
    # An all-letter name ("alice") counts only where it identifies someone: here in user@host.
    assert out == ("token <SECRET> key <SECRET> at <SWEEP_DIR>/jobs and <HOME>/x, user alice on <HOST>.cluster, "
                   "ssh <USER>@<HOST>; "
                   "<SECRET> <SECRET> | roots/tmp/ray https://example.org/home/page Nancy nan inf subprocess 1 commit "
                   "5f7cd574")
    assert clean.scan(out) == []
    kinds = {leak.kind for leak in clean.scan(text)}
    assert kinds >= {"secret value", "GitHub token", "OpenAI/Anthropic-style key", "machine path",
                     "user name", "host name"}
    assert not any(ENV["HF_TOKEN"][4:] in str(leak) for leak in clean.scan(text))


def test_generic_names_and_short_values_are_not_scanned():
    clean = Sanitizer.from_environment(env={"USER": "root", "HOME": "/home/nobody", "MY_PASS": "short"}, hosts=["vm"])
    assert clean.users == set() and clean.secrets == {}
    assert clean.clean("the root cause in a vm, roots/ray") == "the root cause in a vm, roots/ray"
    assert clean.clean("/home/nobody/.cache/x") == "<HOME>/.cache/x"


RSA_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
# Each planted secret, and the part of it that must be gone after cleaning.
SECRETS = {
    "private key block": ("-----BEGIN RSA PRIVATE KEY-----\n" + RSA_BODY + "\n" + RSA_BODY[::-1]
                          + "\n-----END RSA PRIVATE KEY-----", RSA_BODY[10:40]),
    "private key block in JSON": ('{"k": "-----BEGIN PRIVATE KEY-----\\n' + RSA_BODY + '\\n-----END PRIVATE KEY-----"}',
                                  RSA_BODY[10:40]),
    "encrypted key, no END line": ("-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + RSA_BODY + "\n", RSA_BODY[10:40]),
    "key body and END line only": (RSA_BODY + "\n" + RSA_BODY[::-1] + "\n-----END OPENSSH PRIVATE KEY-----",
                                   "END OPENSSH PRIVATE KEY"),
    "AWS access key id": ("key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
    "AWS secret access key": ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    "credentials in a URL": ("git clone https://bob:s3cr3t-pw@git.example.org/x.git", "s3cr3t-pw"),
    "bearer token": ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnopqrstuvwxyz"),
    "JWT": ("jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "dozjgNryP4J3jVmNHl0w5N"),
    "Slack webhook": ("https://hooks.slack.com/services/T0000AAAA/B0000BBBB/XXXXXXXXXXXXXXXXXXXXXXXX", "XXXXXXXXXXXX"),
    "Discord webhook": ("https://discord.com/api/webhooks/1234567/abcDEF-ghiJKL_mno", "abcDEF-ghiJKL"),
    "password assignment": ("db password=hunter22 and passwd: 'correcthorse'", "hunter22"),
    "quoted password": ("passwd: 'correcthorse'", "correcthorse"),
    "Google API key": ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "1234567890abcdefghij"),
    "GitHub fine-grained token": ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "11ABCDEFG0123456789"),
    "GitLab token": ("glpat-abcdefghij0123456789", "abcdefghij0123456789"),
    "Stripe key": ("sk_live_" + "a1" * 12, "a1a1a1a1a1a1"),
    "SendGrid key": ("SG." + "a" * 22 + "." + "b" * 43, "b" * 43),
    "Anthropic key": ("sk-ant-api03-" + "x7" * 20, "x7x7x7x7x7x7"),
    "secret in a URL query": ("GET https://api.example.org/v1?api_key=Zx81Qw72Er63&q=1", "Zx81Qw72Er63"),
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_secret_kind_is_replaced_and_the_scan_agrees(kind):
    text, secret_part = SECRETS[kind]
    clean = Sanitizer(users={"seed"}, hosts={"grpo"})
    assert clean.scan(text), kind
    out = clean.clean(f"before\n{text}\nafter")  # a header's value runs to its line's end
    assert secret_part not in out and "<SECRET>" in out
    assert out.startswith("before\n") and out.endswith("\nafter")
    assert clean.scan(out) == []
    assert not any(secret_part[:12] in str(leak) for leak in clean.scan(text))  # excerpts are masked


@pytest.mark.parametrize("path", [
    "/home/alice/x", "/scratch/alice/x", "/lustre/fs1/alice/x", "/gpfs/alpine/proj/x", "/" + "work/ab12/alice/x",  # split: this checkout itself lives under /work
    "/p/project/cjsc/alice/x", "/p/scratch/cjsc/x", "/global/homes/a/alice/x", "/global/cfs/cdirs/m1/x",
    "/users/alice/x", "/ptmp/alice/x", "/project/def-bob/x", "/fs/ess/PAS123/x", "/mnt/data/alice/x",
    "/tmp/slurm-123/x", "/var/tmp/pbs.4/x", "/dev/shm/x/y", "/cluster/home/alice/x", "/lus/grand/projects/x",
    "/pfs/lustrep1/scratch/x", "/nobackup/alice/x", "/Users/alice/x", "~/x/y", "~alice/x",
])
def test_hpc_home_scratch_and_tmp_layouts_are_machine_paths(path):
    clean = Sanitizer()
    assert clean.clean(f"wrote {path}, done") == "wrote <PATH>, done"
    assert [leak.kind for leak in clean.scan(path)] == ["absolute machine path"]


def test_ordinary_words_as_user_and_host_names_are_replaced_only_where_they_identify_someone():
    clean = Sanitizer(users={"seed", "mean", "ray"}, hosts={"proofgrid", "grpo"})
    prose = "proofgrid ran grpo with seed 42: mean reward 0.3, ray workers 2, seed=42 algo=grpo data/runs/grpo-42"
    assert clean.clean(prose) == prose and clean.scan(prose) == []
    record = {"seed": 42, "algo": "grpo", "mean": "ray", "node": "grpo", "user": "seed", "grpo": {"ray": "seed"},
              "SLURMD_NODENAME": "grpo.cluster", "path": "conf/algo/grpo.yaml"}
    assert clean.clean_json(record) == {**record, "node": "<HOST>", "user": "<USER>",
                                        "SLURMD_NODENAME": "<HOST>.cluster"}
    identifying = ("ssh seed@login1 events.out.tfevents.1700.grpo.123 USER=seed HOSTNAME=grpo "
                   "rsync x proofgrid:/data /srv/x/ray/y")
    assert clean.clean(identifying) == ("ssh <USER>@login1 events.out.tfevents.1700.<HOST>.123 USER=<USER> "
                                        "HOSTNAME=<HOST> rsync x proofgrid:/data <PATH>")
    assert {leak.kind for leak in clean.scan(identifying)} == {"user name", "host name", "absolute machine path"}


def test_secret_named_fields_are_replaced_whole_but_tokenizer_settings_are_not():
    clean = Sanitizer()
    record = {"password": "hunter22", "HF_TOKEN": "abc123def456", "db": {"api_key": "k-77-x"}, "token": None,
              "pad_token": "<|endoftext|>", "eos_token": "</s>", "max_new_tokens": "12345678", "secret_seed": "29"}
    assert clean.clean_json(record) == {**record, "password": "<SECRET>", "HF_TOKEN": "<SECRET>",
                                        "db": {"api_key": "<SECRET>"}}
    text = "pad_token=<|endoftext|> eos_token: [SEPARATOR] max_new_tokens=12345678 HF_TOKEN=abc123def456"
    assert clean.clean(text) == text.replace("abc123def456", "<SECRET>")


def test_abs_keys_are_stripped():
    assert strip_abs_keys({"a": 1, "out_abs": "/x", "n": [{"p_abs": "/y", "q": 2}]}) == {"a": 1, "n": [{"q": 2}]}


def test_evidence_never_imports_trainer_or_launcher():
    package = Path(evidence.__file__).parent
    for path in package.rglob("*.py"):  # the verdict's and the audit's packages too
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("trainer", "launcher") for n in names), path.name


def test_a_field_that_only_contains_a_secret_word_is_not_a_secret_named_field():
    # Arm labels and settings name things like loss_reduction=token_mean (seed 002's DAPO arms).
    clean = Sanitizer()
    csv_text = "setting,dapo-loss_reduction_token_mean,HF_TOKEN\nloss_reduction,token_mean,hf_abcdefghijklmnopqrstuvwxyz0123\n"
    leaks = clean.scan_document("data/tables/algorithm_config.csv", csv_text)
    assert [leak for leak in leaks if "token_mean" in str(leak)] == []
    assert leaks  # the real token is still found
    assert clean.clean_json({"loss_reduction_token_mean": "token_mean", "api_token": "abcdefgh12345678"}) == \
        {"loss_reduction_token_mean": "token_mean", "api_token": "<SECRET>"}


# Texts for the anchored rules: every planted secret, each rule's near misses, case and non-ASCII
# variants (the anchors fold case themselves on ASCII text only), paths, names and literal paths.
ANCHOR_CORPUS = [
    *(text for text, _ in SECRETS.values()),
    *(text.upper() for text, _ in SECRETS.values()), *(text.swapcase() for text, _ in SECRETS.values()),
    *("\u017f " + text for text, _ in SECRETS.values()),  # ſ: non-ASCII, so the engine folds case
    "PASSWORD = 'correcthorse'", "Token\tabcdefghijklmnopqrstuvwxyz012345", "basic  QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
    "my_api_key: 'Zx81Qw72Er63Zx81'", "Credentials = 'Zx81Qw72Er63Zx81'", "credential:x", "secret_access_key = x",
    "aws_key=AKIAIOSFODNN7EXAMPL3 aws.key AKIA0000000000000000", "contraseña: 'correcthorse'", "pwd=hunter22",
    "cloudant_api_pass = 'abcdef0123456789'", "sl_api_key = 'abcdef0123456789abcdef0123456789'",
    "xoxb-1234567890-abcdefghij", "12345678:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawX", "ip 8.8.8.8 and 10.0.0.1",
    "0123456789abcdef0123456789abcdef-us12", "AKC" + "a" * 20, "AP6" + "x" * 20, "ibm key = 'x' secret_key=y",
    "/home/alice/x /tmp/slurm-1/x ~/x C:\\Users\\bob\\x /scratch/j/sweep/jobs /scratch/j/sweeps",
    "ssh seed@login1 events.out.tfevents.1700.grpo.123 USER=seed HOSTNAME=gpu-node-17 gpu-node-17.cluster",
    "nothing to see: step 3 loss 0.01 reward 0.5 #### 7", "",
]


def test_the_anchors_skip_only_rules_that_cannot_match(monkeypatch):
    """Each rule's anchors are a necessary condition: the hits with them equal the rules run on every text."""
    import evidence.seal.sanitize as sanitize

    clean = Sanitizer(users={"seed", "alice"}, hosts={"grpo", "gpu-node-17"}, literals={"/scratch/j/sweep": "<SWEEP_DIR>"},
                      secrets={"hf_" + "a1B2c3" * 5: "HF_TOKEN"})
    anchored = [clean._hits(text) for text in ANCHOR_CORPUS]
    monkeypatch.setattr(sanitize, "_anchored", lambda anchors, text, lowered: True)
    assert [clean._hits(text) for text in ANCHOR_CORPUS] == anchored
    assert sum(map(bool, anchored)) > len(ANCHOR_CORPUS) // 2  # the corpus does hit the rules


def test_every_plugin_anchor_was_read_off_the_installed_plugins_regexes():
    """An anchor is used only while the plugin's regexes are the ones it was read off (else the plugin
    runs unanchored: exact, slower); with the pinned detect-secrets every anchored plugin is in effect."""
    import re

    from evidence.seal.sanitize import PLUGIN_ANCHORS, _detect_secrets, _plugin_anchors

    plugins = {type(plugin).__name__: (plugin, anchors) for plugin, anchors in _detect_secrets()[0]}
    assert set(PLUGIN_ANCHORS) <= set(plugins)
    assert all(plugins[name][1] is not None for name in PLUGIN_ANCHORS)

    class Changed(type(plugins["AWSKeyDetector"][0])):
        denylist = [re.compile("AKIA[0-9A-Z]{16}")]
    Changed.__name__ = "AWSKeyDetector"
    assert _plugin_anchors(Changed()) is None


@pytest.mark.parametrize("seed", range(5))
def test_the_name_trie_matches_what_the_longest_first_alternation_matches(seed):
    """``_alternation`` against ``(?:w1|w2|...)`` longest first, on random words sharing prefixes."""
    import random
    import re

    from evidence.seal.sanitize import _alternation

    rng = random.Random(seed)
    words = {"".join(rng.choice("ab-.1") for _ in range(rng.randint(1, 6))) for _ in range(40)}
    reference = re.compile("(?:" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?=[^b]|$)")
    trie = re.compile("(?:" + _alternation(words) + r")(?=[^b]|$)")
    for _ in range(200):
        text = "".join(rng.choice("ab-.1 x") for _ in range(rng.randint(0, 30)))
        assert [m.span() for m in trie.finditer(text)] == [m.span() for m in reference.finditer(text)], text


def test_rows_cleaned_together_equal_each_cell_cleaned_by_its_column():
    clean = Sanitizer(users={"alice"}, hosts={"gpu-node-17"}, literals={"/scratch/j/sweep": "<SWEEP_DIR>"})
    rows = [{"job": "grpo-1", "path": "/scratch/j/sweep/jobs/grpo-1/run", "node": "gpu-node-17", "bytes": 7},
            {"job": "x", "path": "ssh alice@gpu-node-17", "password": "hunter22", "reason": None},
            {"job": "rpp-2", "path": "run/metrics.jsonl", "HF_TOKEN": "<SECRET>", "user": "alice"}]
    assert clean.clean_rows(rows) == [{k: clean.clean_value(v, k) if isinstance(v, str) else v for k, v in row.items()}
                                      for row in rows]
    assert clean.clean_rows([]) == []


def test_file_names_scanned_together_give_each_name_its_own_leaks():
    clean = Sanitizer(users={"alice"}, hosts={"gpu-node-17"})
    tidy = ["data/runs/grpo-1/run.json", "data/runs/grpo-1/logs/trainer.log", "data/steps.csv"]
    assert clean.scan_names(tidy) == [[], [], []]
    leaky = [*tidy, "data/runs/grpo-1/logs/events.out.tfevents.1.gpu-node-17.3", "home/alice/x"]
    assert clean.scan_names(leaky) == [clean.scan(name, name) for name in leaky]
    assert clean.scan_names(leaky)[3] and clean.scan_names(["one"]) == [clean.scan("one", "one")]


def test_a_name_in_a_csv_column_named_for_it_is_found_and_other_columns_are_not_read_cell_by_cell():
    clean = Sanitizer(hosts={"grpo"})
    text = "arm,node,seed\ngrpo,grpo,1\ngrpo,login2,2\n"
    leaks = clean.scan_document("data/index.csv", text)
    assert [str(leak) for leak in leaks if "node=" in str(leak)] == [str(leak) for leak in leaks if "grpo" in str(leak)]
    assert any("node=grpo" in str(leak) for leak in leaks) and not any("arm=grpo" in str(leak) for leak in leaks)


# The class of machine paths (the module docstring's (a) and (b)) on layouts no rule lists: the names
# come from the environment the sanitiser reads, the path is replaced whole.
CLASS_ENV = {"USER": "qbrandt", "LOGNAME": "qbrandt", "HOSTNAME": "r7i3n05.ice", "HOME": "/zhome/4f/qbrandt",
             "SLURM_TMPDIR": "/localscratch/qbrandt.881.0", "TMPDIR": "/nvme0/tmp-881"}


@pytest.mark.parametrize("path", [
    "/pscratch/sd/q/qbrandt/run/x", "/fsx/qbrandt/ckpt", "/export/home/qbrandt/.cache/x", "/workspace/qbrandt/x",
    "/hpcwork/qbrandt_rl/run", "/dss/dsshome1/0A/QBrandt/x", "/lfs/r7i3n05/tmp/x", "/ssd/r7i3n05.ice/x",
    "/nvme0/tmp-881/ray/session_2", "/nvme0/tmp-881",
])
def test_an_absolute_path_carrying_a_known_name_or_under_a_machine_directory_is_replaced_whole(path):
    clean = Sanitizer.from_environment(env=CLASS_ENV)
    assert clean.clean(f"wrote {path}, done") == "wrote <PATH>, done"
    assert clean.scan(path) and clean.scan(clean.clean(path)) == []


def test_the_machines_own_directories_keep_their_placeholders_and_shared_ones_count_for_nothing():
    import sys

    clean = Sanitizer.from_environment(env=CLASS_ENV)
    assert clean.clean("/zhome/4f/qbrandt/.netrc") == "<HOME>/.netrc"
    assert clean.clean(f"{sys.prefix}/lib/python3/site.py") == "<PYTHON>/lib/python3/site.py"
    assert not {"/", "/usr", "/usr/local", "/opt"} & (set(clean.literals) | clean.directories)
    # Under a placeholder a path goes on, and a name in it is still a name where it identifies someone.
    assert clean.clean("<SWEEP_DIR>/jobs/grpo-42/x <HOST>/tmp/y") == "<SWEEP_DIR>/jobs/grpo-42/x <HOST>/tmp/y"


def test_relative_paths_urls_and_words_holding_a_name_are_no_machine_paths():
    clean = Sanitizer.from_environment(env=CLASS_ENV)
    text = ("data/runs/qbrandt-1/x https://github.com/org/qbrandt-tools /usr/lib/python3.11/os.py "
            "train/loss 3/4 tokens/s and/or </s>")
    assert clean.clean(text) == text and clean.scan(text) == []  # an all-letter name inside a word is no name
    assert clean.clean("file:///fsx/qbrandt/x") == "file://<PATH>"


@pytest.mark.parametrize(("text", "cleaned"), [
    ("mail first.last@example.edu now", "mail <EMAIL> now"),
    ("--mail-user=a.b+slurm@lab.example.co.uk", "--mail-user=<EMAIL>"),
    # A URL's userinfo is a credential (a token alone is one: https://TOKEN@host), whatever it looks like.
    ("https://alice@github.com/org/x.git", "https://<SECRET>@github.com/org/x.git"),
    # A service account's address names no one: a git remote stays readable.
    ("git@github.com:org/x.git ssh://git@gitlab.example.org/x", "git@github.com:org/x.git ssh://git@gitlab.example.org/x"),
    # Metric names and decorators are no addresses; nor is Hydra's group@package override.
    ("pass@1 pass@4.mean eval/pass@2 @dataclass +workload.x@pkg.sub=1 user@host",
     "pass@1 pass@4.mean eval/pass@2 @dataclass +workload.x@pkg.sub=1 user@host"),
])
def test_email_addresses_are_replaced_and_service_accounts_and_metric_names_are_not(text, cleaned):
    clean = Sanitizer()
    assert clean.clean(text) == cleaned
    assert bool(clean.scan(text)) == (text != cleaned) and clean.scan(cleaned) == []


# B15: machine paths are a class. Layouts of a user the sanitiser does not know (no $USER of theirs,
# no root of any list), and a known user's name in other path syntaxes, are replaced whole.
UNKNOWN_LAYOUTS = [
    "/pscratch/sd/j/jdoe/run", "/fsx/jdoe/run", "/export/home/jdoe/run", "/workspace/jdoe/run",
    "/projappl/project_123/jdoe/run", "/afs/cern.ch/user/j/jdoe/run", "/eos/user/j/jdoe/run", "/vast/jdoe/run",
    "/u/jdoe/run", "/g/g20/jdoe/run", "/usr/workspace/jdoe/run", "/Volumes/jdoe-ssd/run",
    "/var/spool/slurmd/job12345/slurm_script", "/dev/shm/jdoe/x",
    r"D:\data\jdoe\run", r"C:\Users\jdoe\x", "E:/runs/jdoe/x", r"\\fileserver\share\jdoe\run",
    "%2Fpscratch%2Fsd%2Fj%2Fjdoe%2Frun", "%2ffsx%2fjdoe%2frun", "file:///fsx/jdoe/run",
]
# Shared system locations and ordinary content: left as they are.
SYSTEM_AND_ORDINARY = [
    "/usr/lib/python3.11/os.py", "/usr/local/lib/python3.11/site-packages/torch/nn.py", "/proc/self/status",
    "/dev/null", "/etc/hosts", "/usr/bin/env", "/sys/fs/cgroup/cpu.max", "/usr/local/cuda-12.4/lib64/x.so",
    "data/runs/grpo-42/metrics.jsonl", "train/kl_loss", "eval/pass@2", "3/4", "tokens/s", "and/or", "</s>",
    "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B", "https://github.com/org/x/blob/main/a.py",
    "1 / 2", "pass@1 0.5", "a: b/c",
]


@pytest.mark.parametrize("path", UNKNOWN_LAYOUTS)
def test_an_absolute_path_of_any_layout_or_syntax_is_a_machine_path(path):
    clean = Sanitizer()
    out = clean.clean(f"saved {path}, done")
    assert out in ("saved <PATH>, done", "saved file://<PATH>, done"), out
    assert "jdoe" not in out and clean.scan(path) and clean.scan(out) == []


@pytest.mark.parametrize("seed", range(5))
def test_random_layouts_no_rule_was_written_for_are_replaced_and_system_ones_are_not(seed):
    import random

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."  # a trailing "." is punctuation
    clean = Sanitizer()
    for _ in range(200):
        parts = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 12))).strip(".") or "x"
                 for _ in range(rng.randint(2, 6))]
        posix = "/" + "/".join(parts)
        if any(posix.startswith(p) for p in ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/", "/proc/", "/sys/", "/dev/")):
            continue
        for form in (posix, "C:\\" + "\\".join(parts), "\\\\" + "\\".join(parts), posix.replace("/", "%2F")):
            out = clean.clean(f"wrote {form} ok")
            # A POSIX path without two letters in a row names nothing (a model's /2/4): none (issue 33 item 5).
            named = form != posix or any(a.isascii() and a.isalpha() and b.isascii() and b.isalpha()
                                         for part in parts for a, b in zip(part, part[1:]))
            assert out == ("wrote <PATH> ok" if named else f"wrote {form} ok"), (form, out)
    for text in SYSTEM_AND_ORDINARY:
        assert clean.clean(text) == text and clean.scan(text) == [], text


# B11: credentials in netrc form, a bare AWS secret access key, and key/value pairs naming a secret.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CREDENTIALS = {
    "netrc on one line": ("machine api.wandb.ai login jdoe password 0123456789abcdef0123456789abcdef01234567",
                          ("jdoe", "0123456789abcdef")),
    "netrc on several lines": ("machine huggingface.co\n  login jdoe\n  password hunter2xyz\n", ("jdoe", "hunter2xyz")),
    "netrc password first": ("machine x.org password Pa55w0rd! login jdoe", ("jdoe", "Pa55w0rd!")),
    "netrc default entry": ("default login anon password s3cretpw", ("anon", "s3cretpw")),
    "AWS secret beside its key id": (f"AKIAIOSFODNN7EXAMPLE {AWS_SECRET}", (AWS_SECRET[:12],)),
    "AWS secret in CSV beside its key id": (f"AKIAIOSFODNN7EXAMPLE,{AWS_SECRET}", (AWS_SECRET[:12],)),
    "AWS secret under an aws word": (f"aws_secret {AWS_SECRET}", (AWS_SECRET[:12],)),
    "AWS secret under a secret word": (f"secret: {AWS_SECRET}", (AWS_SECRET[:12],)),
    "AWS secret in a credentials file": (f"aws_secret_access_key = {AWS_SECRET}", (AWS_SECRET[:12],)),
    "password pair": ("DB_PASSWORD=Tr0ub4dor3x", ("Tr0ub4dor3x",)),
    "token pair": ("wandb_token: 'abcd1234efgh5678'", ("abcd1234efgh5678",)),
    "secret pair in JSON": ('{"client_secret": "q8W2e4R6t8Y0"}', ("q8W2e4R6t8Y0",)),
}


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_netrc_credentials_aws_secrets_and_secret_named_pairs_are_replaced(kind):
    text, secrets = CREDENTIALS[kind]
    clean = Sanitizer()
    out = clean.clean(f"before {text} after")
    assert all(s not in out for s in secrets) and "<SECRET>" in out, out
    assert clean.scan(text) and clean.scan(out) == []


@pytest.mark.parametrize("text", [
    "the default machine learning login page", "commit 0123456789abcdef0123456789abcdef01234567 secret sauce",
    "aws region us-east-1", "pad_token: <|endoftext|>",
])
def test_words_that_look_like_netrc_or_aws_are_left_alone(text):
    clean = Sanitizer()
    assert clean.clean(text) == text and clean.scan(text) == []


@pytest.mark.parametrize("rules", [
    {"secrets": {"hunter2-but-longer-42": "DB_PASSWORD"}}, {"users": {"quinn"}}, {"hosts": {"nodeq7"}},
    {"literals": {"/srv/sweeps/s1": "<SWEEP_DIR>"}},
])
def test_a_text_scanned_before_is_scanned_again_by_a_sanitiser_with_other_rules(rules):
    """scan_document keeps what it found per (rules, name, text): a sanitiser that knows one more secret, name
    or path scans the same file again, and finds what its rule adds."""
    text = '{"user": "quinn", "note": "ran on nodeq7 in /srv/sweeps/s1 with hunter2-but-longer-42"}\n'
    before = Sanitizer().scan_document("runs/a/job.json", text)  # the absolute path alone
    found = Sanitizer(**rules).scan_document("runs/a/job.json", text)
    assert found != before and set(found) - set(before), (rules, found)
    again = Sanitizer(**rules).scan_document("runs/a/job.json", text)
    assert again == found
    again.clear()  # a caller's list is its own
    assert Sanitizer(**rules).scan_document("runs/a/job.json", text) == found


def test_a_sanitisers_rules_cannot_change_after_it_is_built():
    """Its rules are compiled (and its scans remembered) from its fields: a secret or literal added afterwards
    would be in no rule, so the fields are frozen; dataclasses.replace builds another sanitiser."""
    import dataclasses

    clean = Sanitizer(literals={"/srv/a": "<SWEEP_DIR>"}, users={"quinn"})
    with pytest.raises(TypeError):
        clean.secrets["hunter2-but-longer-42"] = "DB_PASSWORD"
    with pytest.raises(TypeError):
        clean.literals["10.1.2.3"] = "<RANK0_NODE_ADDR>"
    with pytest.raises(AttributeError):
        clean.users.add("robin")
    with pytest.raises(dataclasses.FrozenInstanceError):
        clean.secrets = {"hunter2-but-longer-42": "DB_PASSWORD"}
    more = dataclasses.replace(clean, secrets={"hunter2-but-longer-42": "DB_PASSWORD"})
    assert clean.scan("pw hunter2-but-longer-42") == [] and more.scan("pw hunter2-but-longer-42")


# Issue 33 item 2: credentials by their structure. A secret value runs to the end of its value (a quoted one to
# its closing quote, a bare one to the next white space, a header's to its line's end), never to the next
# punctuation; a URL's userinfo, and its query and fragment parameters named for a credential, are secrets;
# so are a credential option's value on a command line and a secret-named key's in JSON, YAML or a shell.
# Each shape: the text, and the parts of it that must be gone after cleaning.
CREDENTIAL_SHAPES = {
    "env password with &": ("MLFLOW_TRACKING_PASSWORD=Tr0ub4dor&3xyz", ("Tr0ub4dor", "&3xyz")),
    "env password with ; and ,": ("DB_PASSWORD=p;a,s.s!w0rd now", ("p;a", ",s.s!w0rd")),
    "env value double-quoted with spaces": ('export HF_TOKEN="correct horse & battery"', ("horse", "battery")),
    "env value single-quoted": ("password='it is & secret' ok", ("it is", "& secret")),
    "short env suffixes": ("DB_PASS=hunter2 MY_PWD=xyz!23", ("hunter2", "xyz!23")),
    "JSON value with &": ('{"password": "Tr0ub4dor&3xyz", "user": 1}', ("Tr0ub4dor", "&3xyz")),
    "JSON value with an escaped quote": ('{"api_key": "ab\\"cd&ef"}', ("ab\\", "cd&ef")),
    "Python repr": ("{'client_secret': 'a&b c;d'}", ("a&b", "c;d")),
    "YAML line with spaces": ("db:\n  password: correct horse battery staple\n  port: 5432", ("horse", "staple")),
    "YAML line with a comment": ("token: s3cr3t-v@lue  # rotated", ("s3cr3t", "v@lue")),
    "URL userinfo with &": ("https://alice:Tr0ub4dor&3@mlflow.example.org/api", ("Tr0ub4dor", "&3")),
    "URL userinfo with a raw @": ("postgresql://bob:p@ss:w0rd@db.example.org:5432/x", ("p@ss", "w0rd")),
    "URL userinfo, password only": ("redis://:p4ss&w0rd@cache.example.org:6379/0", ("p4ss", "w0rd")),
    "URL userinfo, a token alone": ("git clone https://Zq8wR2tY6uI0pA@github.com/org/x.git", ("Zq8wR2tY6uI0pA",)),
    "S3 presigned URL": ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                         "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
                         "&X-Amz-Security-Token=FwoGZXIvYXdzEJr&X-Amz-Expires=3600"
                         "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
                         ("AKIAIOSFODNN7EXAMPLE", "FwoGZXIvYXdzEJr", "aeeed9bbccd4d02ee5c0")),
    "GCS signed URL": ("https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
                       "&X-Goog-Credential=svc%40proj.iam.gserviceaccount.com%2F20240101&X-Goog-Signature=9a8b7c6d5e4f",
                       ("svc%40proj", "9a8b7c6d5e4f")),
    "Azure SAS": ("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&ss=b&sp=r&sig=abc%2Bdef%3D", ("abc%2Bdef",)),
    "CloudFront signed URL": ("https://d1.cloudfront.net/x?Expires=1700000000&Signature=abc~def_ghi&Key-Pair-Id=APKAEX",
                              ("abc~def_ghi", "APKAEX")),
    "OAuth fragment": ("https://app.example.org/cb#access_token=ya29.a0Af&token_type=Bearer", ("ya29.a0Af",)),
    "Authorization: Bearer, short": ("Authorization: Bearer abc.def-ghi", ("abc.def-ghi",)),
    "Authorization: Basic": ("Authorization: Basic dXNlcjpwYXNz", ("dXNlcjpwYXNz",)),
    "Authorization: AWS SigV4": ("Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/s3, "
                                 "SignedHeaders=host, Signature=fe5f80f77d5fa3beca038a248ff027",
                                 ("AKIDEXAMPLE", "fe5f80f77d5fa3beca")),
    "curl header": ('curl -H "X-Api-Key: k3y&v@lue" https://api.example.org', ("k3y", "v@lue")),
    "header in JSON": ('{"Authorization": "Token abc&def", "Accept": "json"}', ("abc", "&def")),
    "Cookie header": ("Cookie: session=abc123; csrftoken=def456", ("abc123", "def456")),
    "option with =": ("mlflow server --password=Tr0ub4dor&3xyz --port 5000", ("Tr0ub4dor", "&3xyz")),
    "option with a space": ("train.py --hf-token abc&def --seed 1", ("abc&def",)),
    "option quoted": ("train.py --api-key 'two words' --seed 1", ("two words",)),
    "option, a vendor's API key": ("wandb login --wandb-api-key=q1w2e3r4", ("q1w2e3r4",)),
}


@pytest.mark.parametrize("shape", sorted(CREDENTIAL_SHAPES))
def test_a_credential_is_replaced_by_its_structure_whole(shape):
    text, parts = CREDENTIAL_SHAPES[shape]
    clean = Sanitizer()
    out = clean.clean(f"before\n{text}\nafter")
    assert "<SECRET>" in out and not [p for p in parts if p in out], out
    assert out.startswith("before\n") and out.endswith("\nafter")
    assert clean.scan(text) and clean.scan(out) == []
    assert not any(p in str(leak) for p in parts for leak in clean.scan(text) if len(p) > 3)  # masked excerpts


def test_a_credential_value_keeps_what_follows_it():
    clean = Sanitizer()
    assert clean.clean("MLFLOW_TRACKING_PASSWORD=Tr0ub4dor&3xyz MLFLOW_TRACKING_USERNAME=x") == \
        "MLFLOW_TRACKING_PASSWORD=<SECRET> MLFLOW_TRACKING_USERNAME=x"
    assert clean.clean("https://h.example.org/o?X-Amz-Date=20240101T000000Z&X-Amz-Signature=ab12cd34&part=2") == \
        "https://h.example.org/o?X-Amz-Date=20240101T000000Z&X-Amz-Signature=<SECRET>&part=2"
    assert clean.clean('{"password": "a \\"b\\" c", "seed": 1}') == '{"password": "<SECRET>", "seed": 1}'
    assert clean.clean("--password=x1y2z3 --seed 1") == "--password=<SECRET> --seed 1"


# Ordinary text that names tokens, keys and passes without holding a credential: left as it is.
NOT_CREDENTIALS = [
    "loss_reduction=token_mean token_mean=1 max_tokens=256 num_tokens: 512",
    "--max-new-tokens 128 --pad-token '<pad>' --tokenizer Qwen/Qwen2.5-0.5B --step-key iteration --seed 1",
    "pad_token: <|endoftext|>", "step_key: iteration", "key: grpo", "the first pass: done", "eval/pass@1=0.5",
    "https://example.org/search?q=token+limits&page=2&keyword=grpo&monkey=1", "design=abc",
    "X-Request-Id: 1234", "Content-Type: application/json", "Authorization required, see the docs",
    "https://huggingface.co/Qwen/Qwen2.5-0.5B", "pip install git+ssh://git@github.com/org/x.git",
    "token=none password: ${DB_PASSWORD} api_key=<SECRET> secret: null", "a secret sauce; a password policy",
    "https://example.org/x?token=&sig=", "kl_loss_type=k3 --lr 1e-6",
    # a resolved-config table: a cell "token" ends its row, the next row's setting is no credential after it
    "algo.mis_level,dapo-loss_reduction_token_mean,token\nalgo.overlong_cache,dapo-loss_reduction_token_mean,true",
]


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_ordinary_text_about_tokens_keys_and_passes_is_left_alone(text):
    clean = Sanitizer()
    assert clean.clean(text) == text and clean.scan(text) == []


# A command line held as a list (a job's argv in command.public.json and run.json, a spec's command): the item after
# a credential option is the credential, whatever its shape; (argv, the positions that are credentials).
ARGV_SHAPES = {
    "the adversary's argv": (["python", "t.py", "--api-key", "Tr0ub4dor&3xyzQ", "--password", "q8Zr2LmPv4Ks9TnWc3Xy"],
                             {3, 5}),
    "token, passphrase, a vendor's key": (["x", "--token", "abcd1234efgh5678", "--ssh-passphrase", "a b c d",
                                           "--wandb-api-key", "0123456789abcdef"], {2, 4, 6}),
    "single dash, underscores, camel case": (["-password", "p@ss;w0rd", "--db_password", "s3cr3t", "--apiKey", "zz9q"],
                                             {1, 3, 5}),
    "short values and punctuation": (["--secret", "ab", "--credentials", "{\"k\": 1}"], {1, 3}),
    "one item --opt=value, the text rules'": (["--password=q8Zr2LmPv4Ks9TnWc3Xy", "--seed", "1"], set()),
    "a password given as --pwd, and a prefixed pwd given a path": (["x", "--pwd", "hunter2hunter2", "--db-pwd", "/x9"],
                                                                  {2, 4}),
}
# Lists that read like a command line but hold no credential: left as they are.
ARGV_NOT_CREDENTIALS = [
    ["--pad-token", "<pad>", "--eos-token", "</s>", "--max-new-tokens", "128"],  # a tokenizer's settings
    ["--token", "--seed", "1"],  # a flag, then the next option
    ["--password", "-x"],  # argparse reads -x as an option
    ["--api-key", "{trainer.api_key}"],  # a spec's placeholder
    ["--password", "${DB_PASSWORD}", "--token", "none", "--api-key", "<SECRET>"],  # configuration
    ["-p", "8080", "--key-file", "cert.pem", "--tokenizer", "gpt2", "--keep", "x"],  # no credential option
    ["--api-key"],  # nothing after it
    ["apptainer", "exec", "--pwd", "/checkout", "img.sif"],  # the directory apptainer starts in (--pwd <dir>)
]


@pytest.mark.parametrize("shape", sorted(ARGV_SHAPES))
def test_an_argv_list_is_sanitised_as_a_command_line(shape):
    from evidence.seal.sanitize import command_line_secrets

    argv, secret = ARGV_SHAPES[shape]
    clean = Sanitizer()
    assert command_line_secrets(argv) == secret
    cleaned = clean.clean_json({"argv": argv, "trainer": {"argv": list(argv)}, "nested": [[*argv]]})
    for out in (cleaned["argv"], cleaned["trainer"]["argv"], cleaned["nested"][0]):
        assert [x for i, x in enumerate(out) if i in secret] == ["<SECRET>"] * len(secret), out
        assert [x for i, x in enumerate(out) if i not in secret] == \
            [clean.clean(x) for i, x in enumerate(argv) if i not in secret], out
        assert not [x for i, x in enumerate(argv) if i in secret and x in json.dumps(out)], out
    leaks = clean.scan_document("command.public.json", json.dumps({"argv": argv}))  # the scan finds each of them
    assert leaks and len([p for p in leaks if p.kind == "secret option value"]) == len(secret), leaks
    assert not [x for x in (argv[i] for i in secret) if len(x) > 3 and x in str(leaks)], leaks  # masked excerpts
    assert clean.scan_document("command.public.json", json.dumps(cleaned)) == []


@pytest.mark.parametrize("argv", ARGV_NOT_CREDENTIALS, ids=lambda a: " ".join(a)[:40])
def test_a_list_without_a_credential_option_value_is_left_alone(argv):
    clean = Sanitizer()
    assert clean.clean_json({"argv": argv}) == {"argv": argv}
    assert clean.scan_document("command.public.json", json.dumps({"argv": argv})) == []


def test_an_argv_in_a_sealed_json_file_is_a_finding_where_its_credential_is_raw():
    clean = Sanitizer()
    text = json.dumps({"argv": ["x", "--password", "q8Zr2LmPv4Ks9TnWc3Xy", "--token", "abcd1234efgh5678"]})
    found = clean.scan_document("data/runs/a/command.public.json", text)
    assert len(found) == 2 and all(p.file == "data/runs/a/command.public.json" for p in found), found
    assert "argv[2] after --password" in str(found[0]) and "q8Z…" in str(found[0]), found
    assert "q8Zr2LmPv4Ks9TnWc3Xy" not in str(found) and "abcd1234efgh5678" not in str(found)


@pytest.mark.parametrize("line", [
    '"argv": ["x", "--password", "q8Zr2LmPv4Ks9TnWc3Xy", "--seed", "1"]',  # a JSON list in a log line
    "argv=['x', '--api-key', 'Tr0ub4dor&3xyzQ', '--seed', '1']",  # Python's repr of one
    '{"argv": ["--hf-token" , "abcd1234efgh5678", "--seed", "1"]}',
])
def test_a_command_line_list_written_out_in_text_has_its_credential_replaced(line):
    clean = Sanitizer()
    out = clean.clean(line)
    assert "<SECRET>" in out and not any(s in out for s in ("q8Zr2L", "Tr0ub4", "abcd1234")), out
    assert "--seed" in out and clean.scan(line) and clean.scan(out) == []
    assert clean.clean('["--token", "--password", "--seed"]') == '["--token", "--password", "--seed"]'


def test_the_launchers_public_record_replaces_an_argv_credential_as_the_bundle_does():
    from launcher.job_records import public_copy

    clean = Sanitizer()
    data = {"argv": ["t.py", "--api-key", "Tr0ub4dor&3xyzQ", "--lr", "0.1"], "env": {"X": "1"}}
    assert public_copy(data, clean) == clean.clean_json(data) == \
        {"argv": ["t.py", "--api-key", "<SECRET>", "--lr", "0.1"], "env": {"X": "1"}}
    assert public_copy(("--password", "q8Zr2LmPv4Ks9TnWc3Xy"), clean) == ["--password", "<SECRET>"]
