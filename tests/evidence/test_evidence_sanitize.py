"""The sanitiser and leak scan on plain text, and the package's import boundary."""

from __future__ import annotations

import ast
from pathlib import Path

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
            "user alice on gpu-node-17.cluster; ghp_" + "Z" * 36 + " sk-" + "q" * 40
            + " | roots/tmp/ray https://example.org/home/page Nancy nan inf subprocess 1 commit 5f7cd574")
    out = clean.clean(text)
    assert out == ("token <SECRET> key <SECRET> at <SWEEP_DIR>/jobs and <HOME>/x, user <USER> on <HOST>.cluster; "
                   "<SECRET> <SECRET> | roots/tmp/ray https://example.org/home/page Nancy nan inf subprocess 1 commit "
                   "5f7cd574")
    assert clean.scan(out) == []
    kinds = {leak.kind for leak in clean.scan(text)}
    assert kinds >= {"secret value", "Hugging Face token", "GitHub token", "OpenAI-style key", "machine path",
                     "absolute machine path", "user name", "host name"}
    assert not any(ENV["HF_TOKEN"][4:] in str(leak) for leak in clean.scan(text))


def test_generic_names_and_short_values_are_not_scanned():
    clean = Sanitizer.from_environment(env={"USER": "root", "HOME": "/home/nobody", "MY_PASS": "short"}, hosts=["vm"])
    assert clean.users == set() and clean.secrets == {}
    assert clean.clean("the root cause in a vm, roots/ray") == "the root cause in a vm, roots/ray"
    assert clean.clean("/home/nobody/.cache/x") == "<HOME>/.cache/x"


def test_abs_keys_are_stripped():
    assert strip_abs_keys({"a": 1, "out_abs": "/x", "n": [{"p_abs": "/y", "q": 2}]}) == {"a": 1, "n": [{"q": 2}]}


def test_evidence_never_imports_trainer_or_launcher():
    package = Path(evidence.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("trainer", "launcher") for n in names), path.name
