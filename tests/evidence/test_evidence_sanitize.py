"""The sanitiser and leak scan on plain text, and the package's import boundary."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import evidence
from evidence.sanitize import Sanitizer, strip_abs_keys

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
    out = clean.clean(f"before {text} after")
    assert secret_part not in out and "<SECRET>" in out
    assert out.startswith("before ") and out.endswith(" after")
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
    import evidence.sanitize as sanitize

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

    from evidence.sanitize import PLUGIN_ANCHORS, _detect_secrets, _plugin_anchors

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

    from evidence.sanitize import _alternation

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
    ("https://alice@github.com/org/x.git", "https://<EMAIL>/org/x.git"),
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
            assert out == "wrote <PATH> ok", (form, out)
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
