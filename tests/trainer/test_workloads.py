"""A workload's task through the entry points users type: each data format, both kinds of prompt, each built-in
reward and a user's ``module:function`` through ``-cd`` (a config directory of the user's own), every bad input
refused in one line before anything runs (``launch.py ... dry_run=true``), and the audit re-scoring with a
built-in reward, with ``--reward`` and its note without it (``python -m evidence audit``). Units underneath:
tests/trainer/test_task.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO, index_rows, job_records, launch
from trainer.inputs import pin

TOY, TOY_MATH = "trainer/assets/toy", "trainer/assets/toy_math"
N_TRAIN, N_TEST = 24, 8
TINY = ("workload.n_updates=2", "workload.eval.n_prompts=4", "workload.eval.k=2", "workload.checkpoint_every=2")
USER_REWARD = '''def score(response, row):
    """1 when the row's answer (after ####) is the response's last word."""
    words = response.split()
    return 1.0 if words and words[-1].strip(".") == str(row["a"]).rsplit("#### ", 1)[-1] else 0.0
'''


LAB_REWARDS = {  # reward modules as users write them, each wrong in its own way
    "lab_exit_on_import": "import sys\nsys.exit(3)\ndef score(response, row):\n    return 1.0\n",
    "lab_argparse": "import argparse\np = argparse.ArgumentParser()\np.add_argument('--threshold', required=True)\n"
                    "ARGS = p.parse_args()\ndef score(response, row):\n    return 1.0\n",
    "lab_class": "class score:\n    def __init__(self, response, row):\n        pass\n",
    "lab_exit": "import sys\ndef score(response, row):\n    sys.exit(0)\n",
    "lab_vanish": "import os\ndef score(response, row):\n    os._exit(0)\n",
    "lab_np": "import numpy as np\ndef score(response, row):\n    return np.float32(1.0 if '4' in response else 0.0)\n",
}


def _rows(path: Path, n: int) -> list[dict]:
    return pq.read_table(path).to_pylist()[:n]


def _adversarial(data: Path, train: list[dict], test: list[dict]) -> None:
    """Splits that are valid but unusual (line separators in a string, a byte-order mark, one very long prompt) and
    ones with a defect beyond the first rows (a field missing from one row, a NaN or list answer, chat rows ending
    with the answer, a message role the chat template refuses), and a model whose chat template refuses it."""
    def lines(name: str, rows: list[dict], bom: bool = False) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (data / name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())

    qa = [{"q": r["question"], "a": r["answer"]} for r in train]
    odd = [dict(r) for r in qa]
    odd[3]["q"] += " \u2028 line sep"
    odd[5]["q"] += " \x85 nel"
    lines("u2028.jsonl", odd)
    lines("bom.jsonl", qa, bom=True)
    huge = [dict(r) for r in qa]
    huge[1]["q"] = " ".join(["apples"] * 20_000)
    lines("huge.jsonl", huge)
    lines("ctx_all.jsonl", [dict(r, ctx="Context.") for r in qa])
    gap = [dict(q=r["question"], a=r["answer"], ctx="Context.") for r in test]
    del gap[2]["ctx"]
    lines("ctx_gap_test.jsonl", gap)
    only = [dict(r) for r in qa]
    only[7]["ctx"] = "only here"
    lines("ctx_only7.jsonl", only)
    lists = [dict(r) for r in qa]
    lists[17]["a"] = [1, 2]
    lines("list_answer.jsonl", lists)
    pq.write_table(pa.Table.from_pylist([{"q": r["q"], "a": float(r["a"].rsplit("####", 1)[-1])} if i != 15 else
                                         {"q": r["q"], "a": float("nan")} for i, r in enumerate(qa)]),
                   data / "nan.parquet")
    msgs = [{"messages": [{"role": "user", "content": r["q"]}], "a": r["a"]} for r in qa]
    lines("msgs.jsonl", msgs)
    lines("msgs_asst.jsonl", [{"messages": [*m["messages"], {"role": "assistant", "content": "It is " + m["a"]}],
                               "a": m["a"]} for m in msgs])
    tool = [dict(m) for m in msgs]
    tool[1] = {"messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "hi"}], "a": "1"}
    lines("msgs_tool.jsonl", tool)
    strict = data / "strict_chat_model"  # toy_math's model whose chat template refuses a tool message
    shutil.copytree(REPO / TOY_MATH / "model", strict)
    template = (strict / "chat_template.jinja").read_text()
    (strict / "chat_template.jinja").write_text(
        "{%- for m in messages %}{%- if m.role == 'tool' %}{{ raise_exception('Unexpected message role tool') }}"
        "{%- endif %}{%- endfor %}" + template)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A user's inputs and config directory: the toy's first rows as Parquet, JSON Lines and a saved Hugging Face
    dataset under data/ (git-ignored; inputs are pinned by their path in the repository), pinned in a manifest
    outside it, a workload per format in ``<lab>/conf/workload/`` (found with -cd) and a reward module."""
    from datasets import Dataset

    root = tmp_path_factory.mktemp("lab")
    rel = Path("data") / f"task-tests-{os.getpid()}"
    data = REPO / rel
    data.mkdir(parents=True)
    train, test = _rows(REPO / TOY / "data/train.parquet", N_TRAIN), _rows(REPO / TOY / "data/test.parquet", N_TEST)
    shutil.copy(REPO / TOY / "data/train.parquet", data / "train.parquet")
    for name, rows in (("train", train), ("test", test)):
        (data / f"{name}.jsonl").write_text("".join(json.dumps({"q": r["question"], "a": r["answer"]}) + "\n"
                                                    for r in rows))
        Dataset.from_list([{"q": r["question"], "a": r["answer"]} for r in rows]).save_to_disk(str(data / f"{name}_hf"))
    pq.write_table(pq.read_table(REPO / TOY / "data/test.parquet").slice(0, N_TEST), data / "test.parquet")
    (data / "empty.jsonl").write_text("")
    (data / "gap.jsonl").write_text(json.dumps({"q": "x", "a": "1"}) + "\n" + json.dumps({"q": "y", "a": None}) + "\n")
    (data / "fake.parquet").write_text('{"q": "x", "a": "1"}\n')
    _adversarial(data, train, test)
    plain = data / "plain_chat_model"  # the toy_math model whose chat template does not read enable_thinking
    shutil.copytree(REPO / TOY_MATH / "model", plain)
    template = (plain / "chat_template.jinja").read_text()
    (plain / "chat_template.jinja").write_text(template[:template.index("{%- if enable_thinking")] + "{%- endif -%}")
    manifest = pin("lab", [TOY + "/model", TOY_MATH + "/model", str(rel)], manifest_dir=root)
    conf = root / "conf" / "workload"
    conf.mkdir(parents=True)
    base = (REPO / "conf/workload/toy.yaml").read_text().split("# The task (docs/workloads.md)")[0]
    base = base.replace("manifest: manifests/toy.json", f"manifest: {manifest}").replace("n_prompts: 64", "n_prompts: 4")

    def workload(name: str, train_path: str, test_path: str, task: str, model: str = TOY + "/model") -> None:
        text = base.replace("name: toy", f"name: {name}").replace(f"model_path: {TOY}/model", f"model_path: {model}")
        text = text.replace(f"train_path: {TOY}/data/train.parquet", f"train_path: {rel}/{train_path}")
        text = text.replace(f"test_path: {TOY}/data/test.parquet", f"test_path: {rel}/{test_path}")
        (conf / f"{name}.yaml").write_text(text + task)

    task = ('data: {prompt_field: q, answer_field: a, messages_field: null}\n'
            'prompt: {template: "Question: {q}\\nAnswer:", chat: false, system: null, enable_thinking: null}\n')
    workload("lab_parquet", "train.parquet", "test.parquet",
             'data: {prompt_field: question, answer_field: answer, messages_field: null}\n'
             'prompt: {template: "Q: {question}\\nA:", chat: false, system: null, enable_thinking: null}\n'
             'reward: gsm8k_hash\n')
    workload("lab_jsonl", "train.jsonl", "test.jsonl", task + "reward: gsm8k_hash\n")
    workload("lab_hf", "train_hf", "test_hf", task + "reward: lab_reward:score\n")
    workload("lab_chat", "train.jsonl", "test.jsonl", task.replace("chat: false", "chat: true").replace(
        "system: null", "system: Be brief.") + "reward: gsm8k_hash\n", model=TOY_MATH + "/model")
    workload("lab_msgs", "msgs.jsonl", "msgs.jsonl", 'data: {prompt_field: null, answer_field: a, messages_field: '
             'messages}\nprompt: {template: null, chat: true, system: null, enable_thinking: null}\n'
             'reward: gsm8k_hash\n', model=TOY_MATH + "/model")
    (root / "lab_reward.py").write_text(USER_REWARD)
    for name, source in LAB_REWARDS.items():
        (root / f"{name}.py").write_text(source)
    sys.path.insert(0, str(root))  # the in-process dry runs import it as launch.py would from PYTHONPATH
    yield {"root": root, "conf": root / "conf", "rel": rel, "env": {"PYTHONPATH": str(root)}}
    sys.path.remove(str(root))
    shutil.rmtree(data, ignore_errors=True)


def _dry(tmp_path: Path, lab: dict, *args: str) -> subprocess.CompletedProcess:
    return launch_in_process(tmp_path / "s", "-cd", str(lab["conf"]), *args, "seed=1", "dry_run=true", env=lab["env"])


def _error(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("proofgrid: error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize(("workload", "shown"), [
    ("lab_parquet", "'Q: Tom buys 9 bags of apples"),
    ("lab_jsonl", "'Question: Tom buys 9 bags of apples"),
    ("lab_hf", "'Question: Tom buys 9 bags of apples"),
    ("lab_chat", "'<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nQuestion: Tom buys 9 bags"),
])
def test_each_format_and_prompt_kind_plans_and_the_dry_run_shows_the_rendered_prompt(tmp_path, lab, workload, shown):
    proc = _dry(tmp_path, lab, f"workload={workload}")
    assert proc.returncode == 0, proc.stderr
    preview = [line for line in proc.stdout.splitlines() if line.startswith(("prompt of", "  row "))]
    assert preview[0].startswith(f"prompt of workload {workload} (prompt sha256 ") and len(preview) == 3
    assert preview[1].startswith(f"  row 0: {shown}"), preview
    commands = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert "hydra.searchpath=[file://<CONFIG_DIR>]" in commands[0] and str(lab["root"]) not in commands[0]


def test_the_default_dry_run_shows_todays_prompt(tmp_path):
    proc = launch_in_process(tmp_path / "s", "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "  row 0: 'Question: Tom buys 9 bags of apples. Each bag has 6 apples. How many apples does Tom buy?" \
           "\\nAnswer:'" in proc.stdout
    assert "reward gsm8k_hash; arm(s) grpo" in proc.stdout


@pytest.mark.parametrize(("args", "says"), [
    (("workload=lab_jsonl", "workload.data.prompt_field=question"),
     "has no field 'question' (workload.data.prompt_field); its fields are q, a"),
    (("workload=lab_jsonl", "workload.data.answer_field=answer"), "has no field 'answer' (workload.data.answer_field)"),
    (("workload=lab_hf", "workload.data.prompt_field=problem"), "_hf has no field 'problem'"),
    (("workload=lab_jsonl", "workload.test_path={rel}/empty.jsonl"), "empty.jsonl has no rows"),
    (("workload=lab_jsonl", "workload.test_path={rel}/gap.jsonl"), "gap.jsonl: row 1 has no answer (its 'a' is None)"),
    (("workload=lab_parquet", "workload.test_path={rel}/fake.parquet"), "fake.parquet is not a Parquet file"),
    (("workload=lab_jsonl", "workload.prompt.template='Solve: {problem}'"),
     "workload.prompt.template names {problem}, which {rel}/train.jsonl does not have; its fields are a, q"),
    (("workload=lab_jsonl", "workload.prompt.chat=true"), "has no chat template"),
    (("workload=lab_chat", "workload.model_path={rel}/plain_chat_model", "workload.prompt.enable_thinking=false"),
     "does not read enable_thinking"),
    (("workload=lab_jsonl", "workload.reward=lab_missing_module:score"),
     "reward lab_missing_module:score does not import (ModuleNotFoundError"),
    (("workload=lab_jsonl", "workload.reward=lab_reward:nothing"), "module lab_reward"),
    (("workload=lab_jsonl", "workload.reward=exact"), "setting workload.reward='exact' is refused"),
    # every row of both splits is rendered, as the trainer does when it starts: the file and the row are named
    (("workload=lab_jsonl", "workload.train_path={rel}/ctx_all.jsonl", "workload.test_path={rel}/ctx_gap_test.jsonl",
      "workload.prompt.template='Q: {q} C: {ctx}'"),
     "{rel}/ctx_gap_test.jsonl: row 2 has no field 'ctx' that workload.prompt.template names"),
    (("workload=lab_jsonl", "workload.train_path={rel}/ctx_only7.jsonl", "workload.prompt.template='Q: {q} C: {ctx}'"),
     "{rel}/ctx_only7.jsonl: row 0 has no field 'ctx' that workload.prompt.template names"),
    (("workload=lab_msgs", "workload.model_path={rel}/strict_chat_model", "workload.test_path={rel}/msgs_tool.jsonl"),
     "{rel}/msgs_tool.jsonl: row 1's conversation is refused by the tokenizer's chat template (TemplateError: "
     "Unexpected message role tool)"),
    # a constant prompt, the answer in the prompt
    (("workload=lab_jsonl", "workload.prompt.template='Q: {{q}}'"),
     "names no field of the row, so every prompt is the same; write {q}, not {{q}}"),
    (("workload=lab_jsonl", "workload.prompt.template=''"), "names no field of the row"),
    (("workload=lab_jsonl", "workload.prompt.template='Solve this.'"), "names no field of the row"),
    (("workload=lab_jsonl", "workload.prompt.template='Q: {q} A: {a}'"),
     "names {a}, the answer (workload.data.answer_field): the answer would be in the prompt; drop it"),
    (("workload=lab_msgs", "workload.train_path={rel}/msgs_asst.jsonl"),
     "{rel}/msgs_asst.jsonl: row 0's conversation ends with an assistant message, which would be in the prompt"),
    # answers that are missing as a number, or not text or a number
    (("workload=lab_parquet", "workload.data.prompt_field=q", "workload.data.answer_field=a",
      "workload.prompt.template='Q: {q}'", "workload.train_path={rel}/nan.parquet"),
     "{rel}/nan.parquet: row 15 has no answer (its 'a' is nan)"),
    (("workload=lab_jsonl", "workload.train_path={rel}/list_answer.jsonl"), "row 17's 'a' is list [1, 2], not text"),
    # a reward module that exits while imported, a class, a function of no arguments, a misspelt built-in
    (("workload=lab_jsonl", "workload.reward=lab_exit_on_import:score"),
     "reward lab_exit_on_import:score does not import (SystemExit 3 while importing lab_exit_on_import: the module "
     "runs code when imported; guard it with if __name__ == \"__main__\")"),
    (("workload=lab_jsonl", "workload.reward=lab_argparse:score"),
     "reward lab_argparse:score does not import (SystemExit 2 while importing lab_argparse; it printed "),
    (("workload=lab_jsonl", "workload.reward=lab_class:score"), "reward lab_class:score is a class, not a function"),
    (("workload=lab_jsonl", "workload.reward=os:getcwd"), "reward os:getcwd cannot be called with (response, row)"),
    (("workload=lab_jsonl", "workload.reward=math_box"),
     "setting workload.reward='math_box' is refused: it must be a built-in reward (gsm8k_hash, math_boxed; did you "
     "mean math_boxed?) or your own function as module:function"),
])
def test_every_bad_input_is_one_line_before_anything_runs(tmp_path, lab, args, says):
    args = tuple(a.replace("{rel}", str(lab["rel"])) for a in args)
    proc = _dry(tmp_path, lab, *args)
    line = _error(proc)
    assert says.replace("{rel}", str(lab["rel"])) in line, line
    assert not (tmp_path / "s" / "jobs").exists()


@pytest.mark.parametrize("split", ["u2028.jsonl", "bom.jsonl"])
def test_json_lines_with_line_separators_in_a_string_or_a_byte_order_mark_plan(tmp_path, lab, split):
    proc = _dry(tmp_path, lab, "workload=lab_jsonl", f"workload.train_path={lab['rel']}/{split}")
    assert proc.returncode == 0, proc.stderr


def test_the_dry_run_cuts_a_long_prompt_and_says_its_length(tmp_path, lab):
    proc = _dry(tmp_path, lab, "workload=lab_jsonl", f"workload.train_path={lab['rel']}/huge.jsonl")
    assert proc.returncode == 0, proc.stderr
    row1 = next(line for line in proc.stdout.splitlines() if line.startswith("  row 1: "))
    length = len("Question: \nAnswer:") + len(" ".join(["apples"] * 20_000))
    assert row1.endswith(f"… ({length:,} characters)") and len(row1) < 500, row1[:600]
    assert len(proc.stdout) < 20_000


def _audit(bundle: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle), *args], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_the_toy_and_toy_math_workloads_are_arms_of_one_sweep_and_the_audit_rescores_both(tmp_path):
    """gsm8k_hash on Parquet with the template, math_boxed on JSON Lines with the chat template: both accepted,
    both re-scored by the audit with their own reward, and the report says the arms ran different workloads."""
    sweep = tmp_path / "both"
    proc = launch(sweep, "workload=toy,toy_math", "algo=grpo", "seed=1", *TINY, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = index_rows(sweep)
    assert {r["accepted"] for r in rows.values()} == {"yes"} and set(rows) == {"grpo-workload_toy-1",
                                                                              "grpo-workload_toy_math-1"}
    run = json.loads((sweep / "jobs/grpo-workload_toy_math-1/run/run.json").read_text())
    assert run["task"]["reward"]["name"] == "math_boxed" and run["task"]["reward"]["library"].startswith("math-verify ")
    assert run["task"]["prompt"]["chat"] is True and len(run["task"]["prompt_sha256"]) == 64
    responses = (sweep / "jobs/grpo-workload_toy_math-1/run/eval/final.jsonl").read_text().splitlines()
    assert all("<|im_start|>" not in json.loads(line)["response"] for line in responses)
    report = (sweep / "bundle/data/report.md").read_text()
    assert "The arms ran different workloads" in report and "reward math_boxed" in report
    audit = _audit(sweep / "bundle.tar.gz")
    assert audit.returncode == 0 and audit.stdout.strip().endswith("clean"), audit.stdout[-2000:]
    assert "not re-derived: its reward" not in audit.stdout
    # A math_boxed response whose stored reward is flipped (its summary left alone): the audit re-scores it.
    from evidence.audit import audit_bag
    from tests.sweeps import reseal_bag

    bag = tmp_path / "forged"
    shutil.copytree(sweep / "bundle", bag)
    final = bag / "data/runs/grpo-workload_toy_math-1/eval/final.jsonl"
    lines = [json.loads(line) for line in final.read_text().splitlines()]
    lines[0]["reward"] = 1.0 - lines[0]["reward"]
    final.write_text("".join(json.dumps(r) + "\n" for r in lines))
    reseal_bag(bag)
    found = [str(p) for p in audit_bag(bag)]
    assert any("final.jsonl" in f and "re-scores to" in f for f in found), found


@pytest.mark.slow
def test_a_users_reward_through_its_config_dir_is_rescored_only_with_its_function_passed(tmp_path, lab):
    sweep = tmp_path / "mine"
    proc = launch(sweep, "-cd", str(lab["conf"]), "workload=lab_hf", "algo=grpo", "seed=1,2", *TINY,
                  env=lab["env"], timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {r["accepted"] for r in index_rows(sweep).values()} == {"yes"}
    run = json.loads((sweep / "jobs/grpo-1/run/run.json").read_text())
    import hashlib

    assert run["task"]["reward"] == {"name": "lab_reward:score",
                                     "source_sha256": hashlib.sha256(USER_REWARD.encode()).hexdigest()}
    subset = json.loads((sweep / "jobs/grpo-1/run/eval/subset.json").read_text())
    assert subset[0][3] == {"a": subset[0][2], "q": subset[0][1]}  # the row the function is handed
    bundle = sweep / "bundle.tar.gz"
    without = _audit(bundle)  # no PYTHONPATH, no --reward: nothing is imported from the bundle
    notes = [line for line in without.stdout.splitlines() if "the rewards were not re-derived" in line]
    assert without.returncode == 0 and notes and all("--reward lab_reward:score" in n for n in notes), without.stdout
    passed = _audit(bundle, "--reward", "lab_reward:score", env=lab["env"])
    assert passed.returncode == 0 and "the rewards were not re-derived" not in passed.stdout, passed.stdout[-2000:]
    # --strict: what stays a note is the subset (its split is a saved dataset, a directory), not the rewards
    strict = _audit(bundle, "--reward", "lab_reward:score", "--strict", env=lab["env"]).stdout.strip().splitlines()
    assert strict[-1] == "0 finding(s), 1 not re-derived (--strict)", strict
    assert _audit(bundle, "--strict").stdout.strip().splitlines()[-1] == \
        f"0 finding(s), {1 + len(notes)} not re-derived (--strict)"
    other = tmp_path / "other"
    other.mkdir()
    (other / "lab_reward.py").write_text(USER_REWARD.replace("1.0 if", "1 if"))
    changed = _audit(bundle, "--reward", "lab_reward:score", env={"PYTHONPATH": str(other)})
    assert "--reward lab_reward:score has source sha256" in changed.stdout, changed.stdout[-2000:]
    missing = _audit(bundle, "--reward", "lab_nothing:score")
    assert missing.returncode == 2 and "does not import" in missing.stderr


@pytest.mark.slow
def test_a_reward_that_returns_a_value_outside_zero_one_fails_the_job_naming_the_row_and_the_value(tmp_path, lab):
    (lab["root"] / "lab_bad_reward.py").write_text("def score(response, row):\n    return 2.5\n")
    sweep = tmp_path / "bad"
    proc = launch(sweep, "-cd", str(lab["conf"]), "workload=lab_jsonl", "workload.reward=lab_bad_reward:score",
                  "seed=1", *TINY, env=lab["env"], timeout=600)
    assert proc.returncode != 0
    record = job_records(sweep)["grpo-1"]
    assert record["state"] == "FAILED"
    log = (sweep / "jobs/grpo-1/trainer.log").read_text()
    assert "the reward of row " in log and "of the train split is 2.5, outside [0, 1]" in log, log[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(("reward", "cause"), [
    ("lab_exit:score", "reward lab_exit:score raised SystemExit on row "),  # sys.exit(0) while scoring
    ("lab_vanish:score", "the trainer exited with 0 but its run.json status is 'running', not 'completed'"),
])
def test_a_reward_that_exits_while_scoring_fails_the_job_with_the_cause(tmp_path, lab, reward, cause):
    sweep = tmp_path / "exits"
    proc = launch(sweep, "-cd", str(lab["conf"]), "workload=lab_jsonl", f"workload.reward={reward}", "seed=1", *TINY,
                  env=lab["env"], timeout=600)
    assert proc.returncode != 0
    record = job_records(sweep)["grpo-1"]
    assert record["state"] == "FAILED" and cause in record["failure"], record


@pytest.mark.slow
def test_a_reward_returning_a_numpy_scalar_trains(tmp_path, lab):
    sweep = tmp_path / "np"
    proc = launch(sweep, "-cd", str(lab["conf"]), "workload=lab_jsonl", "workload.reward=lab_np:score", "seed=1",
                  *TINY, env=lab["env"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert job_records(sweep)["grpo-1"]["state"] == "COMPLETED"


def test_trl_gets_the_workloads_task_as_one_json_argument(tmp_path):
    """trainer=trl: the adapter renders the same prompts and scores with the same reward, read from ``--task``
    (the ``{task}`` placeholder: one JSON argument, so a template's newline cannot break the command's line)."""
    import yaml

    from facts.task import Task
    from trainer.adapters.trl_grpo import parser

    proc = launch_in_process(tmp_path / "s", "trainer=trl", "workload=toy_math", "algo=grpo", "seed=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("[0]")]
    task_json = line.split(" --task ", 1)[1]  # the last argument: TRL's optional options are null here
    declared = yaml.safe_load((REPO / "conf/workload/toy_math.yaml").read_text())
    assert Task.of(json.loads(task_json)) == Task.of(declared)
    default = launch_in_process(tmp_path / "d", "trainer=trl", "algo=grpo", "seed=1", "dry_run=true")
    (line,) = [line for line in default.stdout.splitlines() if line.startswith("[0]")]
    text = line.split(" --task ", 1)[1]
    assert "\\n" in text and parser().parse_args(["--model-dir", "m", "--train", "t", "--output-dir", "o", "--seed",
                                                   "1", "--steps", "1", "--algo", "grpo", "--loss-reduction",
                                                   "response_mean", "--kl-coef", "0", "--lr", "1e-4",
                                                   "--prompts-per-step", "1", "--responses-per-prompt", "2",
                                                   "--max-response-len", "8", "--task", text]).task == Task()


@pytest.mark.slow
def test_trl_trains_toy_math_with_its_chat_prompt_and_math_boxed_and_the_run_is_accepted(tmp_path):
    """trainer=trl on the chat workload: TRL's reward is math_boxed of the rendered chat prompts' completions, the
    run is judged and audited as proofgrid's are."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:  # make test installs it: a missing TRL is a broken install
        pytest.fail("TRL is not installed: `make trl` (the pinned trl extra; make test installs it)")
    sweep = tmp_path / "trl"
    proc = launch(sweep, "trainer=trl", "workload=toy_math", "algo=grpo", "seed=1", *TINY, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert index_rows(sweep)["grpo-trl-1"]["accepted"] == "yes"
    record = json.loads((sweep / "jobs/grpo-trl-1/run/trainer/trl_run.json").read_text())
    assert record["settings"]["task"]["reward"] == "math_boxed" and record["settings"]["task"]["prompt"]["chat"]
    run = json.loads((sweep / "jobs/grpo-trl-1/run/run.json").read_text())
    assert run["task"]["reward"]["name"] == "math_boxed"
    audit = _audit(sweep / "bundle.tar.gz")
    assert audit.returncode == 0, audit.stdout[-2000:]


@pytest.mark.slow
def test_ray_reward_workers_run_a_users_reward_as_they_run_the_built_ins(tmp_path, lab):
    sweep = tmp_path / "ray"
    proc = launch(sweep, "-cd", str(lab["conf"]), "workload=lab_jsonl", "workload.reward=lab_reward:score",
                  "workload.reward_workers=1", "workload.cpus_per_job=2", "seed=1", *TINY, env=lab["env"], timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert index_rows(sweep)["grpo-1"]["accepted"] == "yes"
    metrics = [json.loads(line) for line in (sweep / "jobs/grpo-1/run/metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all(0.0 <= m["rollout/raw_reward"] <= 1.0 for m in metrics)
