"""A workload's task in units: its splits read with a field map (Parquet, JSON Lines, a saved Hugging Face dataset)
and every way a split is refused, the prompt (template and chat template), the built-in rewards against
expectations written here, a user's reward and the values a reward may not return. The same through launch.py
and python -m evidence: tests/trainer/test_workloads.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from facts.evaluation import subset_bytes, subset_labels, subset_rows
from facts.repo import REPO_ROOT
from facts.reward import (
    Reward,
    RewardError,
    RewardValueError,
    checked,
    last_boxed,
    math_boxed,
    math_reward,
    reward,
)
from facts.splits import Fields, SplitError, split_rows
from facts.task import DEFAULT_TEMPLATE, Task, TemplateError, template_fields

REPO = REPO_ROOT
TOY_TEST = REPO / "trainer/assets/toy/data/test.parquet"
TOY_MATH = REPO / "trainer/assets/toy_math"

ROWS = [{"problem": "What is 1/2 + 1/4?", "answer": "3/4", "level": 2},
        {"problem": "What is 2 + 2?", "answer": "4", "level": 1}]


def _parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _hf(path: Path, rows: list[dict]) -> Path:
    from datasets import Dataset

    Dataset.from_list(rows).save_to_disk(str(path))
    return path


FIELDS = Fields(prompt_field="problem", answer_field="answer")


@pytest.mark.parametrize("write", [_parquet, _jsonl, _hf], ids=["parquet", "jsonl", "hf_dataset"])
def test_each_format_reads_the_same_rows_with_the_field_map(tmp_path, write):
    name = {"_parquet": "s.parquet", "_jsonl": "s.jsonl", "_hf": "s"}[write.__name__]
    rows = split_rows(write(tmp_path / name, ROWS), FIELDS)
    assert [(r.index, r.question, r.label) for r in rows] == [(0, "What is 1/2 + 1/4?", "3/4"), (1, "What is 2 + 2?", "4")]
    assert rows[0].row == {"answer": "3/4", "level": 2, "problem": "What is 1/2 + 1/4?"}


def test_the_default_reads_the_toy_split_as_before():
    """Today's reader took the question and answer columns and normalised the answer after ####."""
    table = pq.read_table(TOY_TEST, columns=["question", "answer"])
    before = [(i, q, a.rsplit("####", 1)[1].strip()) for i, (q, a) in
              enumerate(zip(table.column("question").to_pylist(), table.column("answer").to_pylist()))]
    rows = split_rows(TOY_TEST, Fields(), reward("gsm8k_hash").normalize)
    assert [(r.index, r.question, r.label) for r in rows] == before


@pytest.mark.parametrize(("write", "name"), [(_parquet, "s.parquet"), (_jsonl, "s.jsonl"), (_hf, "s")])
def test_a_wrong_field_names_the_file_the_setting_and_the_fields_it_has(tmp_path, write, name):
    path = write(tmp_path / name, ROWS)
    with pytest.raises(SplitError, match=r"has no field 'question' \(workload.data.prompt_field\); its fields are "
                                         r"problem, answer, level"):
        split_rows(path, Fields(prompt_field="question", answer_field="answer"))
    with pytest.raises(SplitError, match=r"no field 'solution' \(workload.data.answer_field\)"):
        split_rows(path, Fields(prompt_field="problem", answer_field="solution"))


@pytest.mark.parametrize("missing", [None, "", "  "])
def test_a_row_without_an_answer_is_refused_naming_the_row(tmp_path, missing):
    path = _jsonl(tmp_path / "s.jsonl", [ROWS[0], {**ROWS[1], "answer": missing}])
    with pytest.raises(SplitError, match=r"s.jsonl: row 1 has no answer"):
        split_rows(path, FIELDS)


def test_a_row_lacking_the_answer_key_is_refused(tmp_path):
    path = _jsonl(tmp_path / "s.jsonl", [ROWS[0], {"problem": "x"}])
    with pytest.raises(SplitError, match="row 1 has no answer"):
        split_rows(path, FIELDS)


@pytest.mark.parametrize("write", [_parquet, _jsonl, _hf], ids=["parquet", "jsonl", "hf_dataset"])
def test_an_empty_split_is_refused(tmp_path, write):
    name = {"_parquet": "e.parquet", "_jsonl": "e.jsonl", "_hf": "e"}[write.__name__]
    path = tmp_path / name
    if write is _parquet:
        pq.write_table(pa.table({"problem": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path)
    elif write is _hf:
        from datasets import Dataset

        Dataset.from_dict({"problem": [], "answer": []}).save_to_disk(str(path))
    else:
        path.write_text("")
    with pytest.raises(SplitError, match="has no rows"):
        split_rows(path, FIELDS)


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("x.parquet", b'{"problem": "a"}\n', "is not a Parquet file"),
    ("x.jsonl", b"PAR1\x00\x01garbage", "is not JSON Lines: line 1 is not JSON"),
    ("x.jsonl", b'[1, 2]\n', "line 1 is a list"),
    ("x.jsonl", b"\xff\xfe\x00", "not UTF-8"),
    ("x.csv", b"problem,answer\n", "a split is a .parquet file, a .jsonl file or a directory"),
])
def test_a_file_that_is_not_what_its_name_says_is_refused(tmp_path, name, content, needle):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(SplitError, match=needle):
        split_rows(tmp_path / name, FIELDS)


def test_a_directory_that_is_not_a_saved_dataset_or_is_a_dataset_dict_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(SplitError, match="not a Hugging Face dataset saved with save_to_disk"):
        split_rows(tmp_path / "plain", FIELDS)
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(SplitError, match=r"is a Hugging Face DatasetDict \(splits test, train\); name one split's"):
        split_rows(tmp_path / "dd", FIELDS)


def test_chat_data_reads_its_messages_and_refuses_rows_that_are_not_messages(tmp_path):
    conv = [{"role": "user", "content": "2 + 2?"}]
    rows = split_rows(_jsonl(tmp_path / "c.jsonl", [{"messages": conv, "answer": "4"}]),
                      Fields(prompt_field=None, messages_field="messages"))
    assert json.loads(rows[0].question) == conv
    bad = _jsonl(tmp_path / "b.jsonl", [{"messages": "2 + 2?", "answer": "4"}])
    with pytest.raises(SplitError, match=r"row 0's 'messages' is not a list of \{role, content\} messages"):
        split_rows(bad, Fields(prompt_field=None, messages_field="messages"))


def test_template_fields_and_bad_templates():
    assert template_fields(DEFAULT_TEMPLATE) == ["question"]
    assert template_fields("{a} {b.c} {d[0]} {a} {{literal}}") == ["a", "b", "d"]
    for bad in ("{", "{0}", "{}"):
        with pytest.raises(TemplateError):
            template_fields(bad)


def test_the_default_task_and_its_prompt_digest():
    assert Task().is_default() and Task.of({}).is_default()
    assert not Task.of({"reward": "math_boxed"}).is_default()
    assert Task.of({"prompt": {"template": "Q: {question}"}}).prompt_sha256 != Task().prompt_sha256
    assert Task.of(Task.of({"reward": "math_boxed", "data": {"answer_field": "x"}}).settings()) == \
        Task.of({"reward": "math_boxed", "data": {"answer_field": "x"}})


# ---- rewards: expectations written here, not by calling the checker on both sides


@pytest.mark.parametrize(("response", "label", "expected"), [
    ("so \\boxed{3/4}", "3/4", 1.0),
    ("so \\boxed{0.75}", "3/4", 1.0),             # equivalent values, not equal strings
    ("so \\boxed{\\frac{3}{4}}", "3/4", 1.0),
    ("so \\boxed{\\frac{3}{4}}", "\\boxed{0.75}", 1.0),  # a label with its own box
    ("\\boxed{1} then \\boxed{4}", "4", 1.0),      # the last box counts
    ("\\boxed{4} then \\boxed{1}", "4", 0.0),
    ("the answer is 4", "4", 0.0),                 # no box: 0
    ("\\boxed{5}", "4", 0.0),
    ("\\boxed{x^{2}}", "x^2", 1.0),                # nested braces
    ("\\boxed{4", "4", 0.0),                       # an unclosed box is no answer
])
def test_math_boxed_checks_the_last_box_for_equivalence(response, label, expected):
    assert math_boxed(response, label) == expected


def test_last_boxed_balances_braces():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b") == "\\frac{1}{2}"
    assert last_boxed("no box") is None


def test_gsm8k_hash_is_todays_rule():
    assert reward("gsm8k_hash").function is math_reward
    assert reward("gsm8k_hash").normalize("x\n#### 7 ") == "7"


@pytest.mark.parametrize("value", [float("nan"), math.inf, -0.1, 1.5, "1", None, True, [1.0]])
def test_a_reward_value_outside_zero_one_or_not_a_number_is_refused_naming_the_row(value):
    with pytest.raises(RewardValueError, match="row 7 of the test split"):
        checked(value, "row 7 of the test split")
    scorer = Reward("m:f", lambda response, row: value, takes_row=True)
    with pytest.raises(RewardValueError, match=r"row 3 .*" + (r"nan|inf|-0.1|1.5|'1'|None|True|\[1.0\]")):
        scorer.score("x", "y", {}, "row 3 of the train split")


def test_a_reward_that_raises_fails_naming_the_row():
    def boom(response, row):
        raise KeyError("answer")

    with pytest.raises(RewardValueError, match=r"reward m:f raised KeyError on row 5 of the train split"):
        Reward("m:f", boom, takes_row=True).score("x", "y", {}, "row 5 of the train split")


def test_a_user_reward_is_imported_with_its_source_digest_and_called_with_the_row(tmp_path, monkeypatch):
    import hashlib

    source = "def score(response, row):\n    return 1.0 if row['answer'] in response else 0.0\n"
    (tmp_path / "my_task_reward.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    scorer = reward("my_task_reward:score")
    assert scorer.takes_row and scorer.source_sha256 == hashlib.sha256(source.encode()).hexdigest()
    assert scorer.score("it is 4", "ignored", {"answer": "4"}, "row 0") == 1.0
    assert scorer.record() == {"name": "my_task_reward:score", "source_sha256": scorer.source_sha256}
    with pytest.raises(RewardError, match=r"reward no_such_module_xyz:score does not import \(ModuleNotFoundError"):
        reward("no_such_module_xyz:score")
    with pytest.raises(RewardError, match="has no function missing"):
        reward("my_task_reward:missing")
    with pytest.raises(RewardError, match="is not a built-in"):
        reward("exact_match")


def test_the_subset_keeps_todays_bytes_and_carries_the_row_only_for_a_user_reward():
    assert subset_bytes([(0, "q", "1")]) == b'[[0,"q","1"]]'
    data = subset_bytes([(0, "q", "1", {"a": 1}), (1, "r", "2", {"a": 2})])
    assert subset_labels(data) == {0: "1", 1: "2"} and subset_rows(data) == {0: {"a": 1}, 1: {"a": 2}}
    with pytest.raises(ValueError):
        subset_labels(b'[[0,"q","1",5]]')


# ---- prompts


@pytest.mark.slow  # loads transformers' tokenizer (seconds of imports)
def test_a_template_prompt_and_a_chat_prompt_with_enable_thinking_passed_through():
    from trainer.prompts import PromptError, PromptRenderer, check_prompt, load_tokenizer

    row = split_rows(TOY_MATH / "data/test.jsonl", FIELDS)[0]
    text = PromptRenderer(Task.of({"prompt": {"template": "Problem: {problem}"}})).render(row)
    assert text == f"Problem: {row.row['problem']}"
    tokenizer = load_tokenizer(TOY_MATH / "model")
    chat = {"template": "{problem}", "chat": True, "system": "Be brief."}
    plain = PromptRenderer(Task.of({"prompt": chat}), tokenizer).render(row)
    thinking_off = PromptRenderer(Task.of({"prompt": {**chat, "enable_thinking": False}}), tokenizer).render(row)
    assert plain == (f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{row.row['problem']}<|im_end|>\n"
                     "<|im_start|>assistant\n")
    assert thinking_off == plain + "<think>\n\n</think>\n\n"
    check_prompt(Task.of({"prompt": {**chat, "enable_thinking": False}}), TOY_MATH / "model", ["problem"], "t")
    with pytest.raises(PromptError, match="has no chat template"):
        check_prompt(Task.of({"prompt": chat}), REPO / "trainer/assets/toy/model", ["problem"], "t")
    with pytest.raises(PromptError, match=r"names \{question\}, which t does not have; its fields are problem"):
        check_prompt(Task(), TOY_MATH / "model", ["problem"], "t")


# ---- the second embedded workload


def test_toy_math_is_pinned_and_its_workload_states_the_task_its_model_was_warm_started_on():
    import yaml

    from trainer.assets import build_toy_math
    from trainer.inputs import verify_inputs

    declared = yaml.safe_load((REPO / "conf/workload/toy_math.yaml").read_text())
    pinned = verify_inputs(declared["manifest"], [declared["model_path"], declared["train_path"], declared["test_path"]])
    assert len(pinned) == 2 + len(list((TOY_MATH / "model").iterdir()))
    assert Task.of(declared) == Task.of(build_toy_math.TASK)
    config = json.loads((TOY_MATH / "model/config.json").read_text())
    assert (config["architectures"], config["head_dim"]) == (["Qwen3ForCausalLM"], 32)
    rows = [json.loads(line) for line in (TOY_MATH / "data/test.jsonl").read_text().splitlines()]
    assert len(rows) == 256 and all(r["solution"].endswith(f"\\boxed{{{r['answer']}}}") for r in rows)
    assert all(math_boxed(r["solution"], r["answer"]) == 1.0 for r in rows[:32])


@pytest.mark.slow
def test_toy_math_rebuilds_byte_for_byte(tmp_path):
    """Two builds (a short warm start: its bytes are the model's only ones that depend on the steps) are the same
    bytes, and their data and tokenizer are the committed ones."""
    for out in ("a", "b"):
        subprocess_build = [sys.executable, "-m", "trainer.assets.build_toy_math", "--out", str(tmp_path / out),
                            "--sft-steps", "3"]
        assert subprocess.run(subprocess_build, cwd=REPO, capture_output=True).returncode == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    for f in files:
        if f.name != "model.safetensors":
            assert (tmp_path / "a" / f).read_bytes() == (TOY_MATH / f).read_bytes(), f
