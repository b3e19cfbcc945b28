"""What a workload's task refuses, and what it reads as it is, in units: JSON Lines with line separators inside a
string or a byte-order mark, answers that are missing (NaN, NaT) or not text or a number, chat rows that end with
the answer, templates that name no field or the answer, a row the template or the chat template cannot render
(named with its file), a user's reward that exits, hangs, has the wrong signature or returns numpy or torch
scalars. The same through launch.py: tests/trainer/test_workloads.py."""

from __future__ import annotations

import decimal
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from facts.repo import REPO_ROOT
from facts.reward import Reward, RewardError, RewardValueError, checked, reward, reward_name_problem
from facts.splits import Fields, SplitError, count_rows, split_rows
from facts.task import Task
from trainer.prompts import PREVIEW_CHARS, PromptError, PromptRenderer, check_prompt, preview

REPO = REPO_ROOT
FIELDS = Fields(prompt_field="q", answer_field="a")
CHAT = Fields(prompt_field=None, answer_field="a", messages_field="messages")


def _lines(path: Path, rows: list[dict], end: str = "\n", bom: bool = False) -> Path:
    text = "".join(json.dumps(r, ensure_ascii=False) + end for r in rows)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


# ---- JSON Lines as JSON writes them


@pytest.mark.parametrize("inside", ["\u2028", "\u2029", "\x85"], ids=["U+2028", "U+2029", "U+0085"])
def test_a_line_separator_inside_a_string_is_content_not_a_line_end(tmp_path, inside):
    rows = [{"q": f"first {inside} still the first", "a": "1"}, {"q": "second", "a": "2"}]
    path = _lines(tmp_path / "s.jsonl", rows)
    read = split_rows(path, FIELDS)
    assert [r.question for r in read] == [rows[0]["q"], "second"] and count_rows(path) == 2


@pytest.mark.parametrize(("end", "bom"), [("\n", True), ("\r\n", True), ("\r\n", False)],
                         ids=["bom", "bom-crlf", "crlf"])
def test_a_byte_order_mark_and_crlf_line_ends_are_not_content(tmp_path, end, bom):
    rows = [{"q": "x", "a": "1"}, {"q": "y", "a": "2"}]
    path = _lines(tmp_path / "s.jsonl", rows, end=end, bom=bom)
    assert [r.row for r in split_rows(path, FIELDS)] == rows and count_rows(path) == 2


def test_a_line_that_is_not_json_is_still_named_by_its_number(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"q": "x", "a": "1"}\r\n\r\n{"q": \r\n')
    with pytest.raises(SplitError, match=r"line 3 is not JSON"):
        split_rows(path, FIELDS)


# ---- answers


@pytest.mark.parametrize("missing", [float("nan"), None], ids=["nan", "null"])
def test_a_missing_number_in_parquet_is_a_row_without_an_answer(tmp_path, missing):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"q": ["x", "y"], "a": pa.array([1.0, missing], pa.float64())}), path)
    with pytest.raises(SplitError, match=r"s.parquet: row 1 has no answer \(its 'a' is (nan|None)\)"):
        split_rows(path, FIELDS)


def test_a_decimal_nan_is_a_row_without_an_answer():
    with pytest.raises(SplitError, match="row 1 has no answer"):
        split_rows("x.jsonl", FIELDS, records=[{"q": "x", "a": "1"}, {"q": "y", "a": decimal.Decimal("NaN")}])


def test_pandas_nat_is_a_row_without_an_answer():
    import pandas as pd

    with pytest.raises(SplitError, match="row 1 has no answer"):
        split_rows("x.jsonl", FIELDS, records=[{"q": "x", "a": "1"}, {"q": "y", "a": pd.NaT}])


@pytest.mark.parametrize(("answer", "kind"), [([1, 2], "list"), ({"x": 1}, "dict"), (True, "bool")])
def test_an_answer_that_is_not_text_or_a_number_is_refused(tmp_path, answer, kind):
    path = _lines(tmp_path / "s.jsonl", [{"q": "x", "a": "1"}, {"q": "y", "a": answer}])
    with pytest.raises(SplitError, match=rf"s.jsonl: row 1's 'a' is {kind} .*not text or a number"):
        split_rows(path, FIELDS)


def test_numbers_remain_answers(tmp_path):
    path = _lines(tmp_path / "s.jsonl", [{"q": "x", "a": 54}, {"q": "y", "a": 2.5}])
    assert [r.label for r in split_rows(path, FIELDS)] == ["54", "2.5"]


@pytest.mark.parametrize("last", ["assistant", "system", "tool"])
def test_a_conversation_that_does_not_end_with_the_users_message_is_refused(tmp_path, last):
    ok = {"messages": [{"role": "user", "content": "2 + 2?"}], "a": "4"}
    leak = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": last, "content": "4"}], "a": "4"}
    path = _lines(tmp_path / "c.jsonl", [ok, leak])
    article = "an" if last == "assistant" else "a"
    with pytest.raises(SplitError, match=rf"row 1's conversation ends with {article} {last} message, which would be in "
                                         r"the prompt: drop it from the data"):
        split_rows(path, CHAT)


# ---- templates


def _task(template: str, answer: str = "a") -> Task:
    return Task.of({"data": {"prompt_field": "q", "answer_field": answer}, "prompt": {"template": template}})


@pytest.mark.parametrize(("template", "says"), [
    ("Q: {{q}}", r"names no field of the row, so every prompt is the same; write \{q\}, not \{\{q\}\}"),
    ("", r"'' names no field of the row, so every prompt is the same; name the prompt field in it \(\{q\}\)"),
    ("Solve this.", r"names no field of the row.*\(\{q\}\)"),
    ("Q: {q} A: {a}", r"names \{a\}, the answer \(workload.data.answer_field\): the answer would be in the prompt"),
    ("Q: {q} {ctx}", r"names \{ctx\}, which t does not have; its fields are q, a"),
])
def test_a_template_that_names_no_field_the_answer_or_a_missing_field_is_refused(template, says):
    with pytest.raises(PromptError, match=says):
        check_prompt(_task(template), REPO / "trainer/assets/toy/model", ["q", "a"], "t")


def test_every_row_is_rendered_and_the_one_lacking_a_field_is_named_with_its_file():
    rows = split_rows("x.jsonl", FIELDS, records=[{"q": "x", "a": "1", "ctx": "c"}, {"q": "y", "a": "2"}])
    renderer = PromptRenderer(_task("Q: {q} C: {ctx}"))
    with pytest.raises(PromptError, match=r"^data/x.jsonl: row 1 has no field 'ctx' that workload.prompt.template "
                                          r"names: fill it in every row, or drop it from the template$"):
        renderer.render_rows(rows, "data/x.jsonl")
    assert renderer.render_rows(rows[:1], "data/x.jsonl") == ["Q: x C: c"]


@pytest.mark.slow  # loads transformers' tokenizer (seconds of imports)
def test_a_row_the_chat_template_refuses_is_named_with_its_file(tmp_path):
    from trainer.prompts import load_tokenizer

    model = tmp_path / "strict"
    import shutil

    shutil.copytree(REPO / "trainer/assets/toy_math/model", model)
    template = (model / "chat_template.jinja").read_text()
    (model / "chat_template.jinja").write_text(
        "{%- for m in messages %}{%- if m.role == 'tool' %}{{ raise_exception('Unexpected message role tool') }}"
        "{%- endif %}{%- endfor %}" + template)
    rows = split_rows("t.jsonl", CHAT, records=[
        {"messages": [{"role": "user", "content": "hi"}], "a": "1"},
        {"messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "hi"}], "a": "1"}])
    renderer = PromptRenderer(Task.of({"data": {"messages_field": "messages", "answer_field": "a"},
                                       "prompt": {"template": None, "chat": True}}), load_tokenizer(model))
    with pytest.raises(PromptError, match=r"^data/t.jsonl: row 1's conversation is refused by the tokenizer's chat "
                                          r"template \(TemplateError: Unexpected message role tool\)"):
        renderer.render_rows(rows, "data/t.jsonl")


def test_the_preview_of_a_long_prompt_is_cut_with_its_length():
    assert preview("Question: 1\nAnswer:") == repr("Question: 1\nAnswer:")
    long = "apples " * 200_000
    shown = preview(long)
    assert shown == f"{long[:PREVIEW_CHARS]!r}… (1,400,000 characters)" and len(shown) < PREVIEW_CHARS + 40


# ---- a user's reward


def _module(tmp_path: Path, monkeypatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(("source", "says"), [
    ("import sys\nsys.exit(3)\n", r"SystemExit 3 while importing {m}: the module runs code when imported; guard it "
                                  r"with if __name__ == \"__main__\"\)$"),
    ("import argparse\nargparse.ArgumentParser().add_argument('--threshold', required=True)\n"
     "argparse.ArgumentParser(prog='x').parse_args(['--nope'])\n",
     r"SystemExit 2 while importing {m}; it printed 'x: error: unrecognized arguments: --nope': the module runs"),
    ("raise KeyboardInterrupt\n", r"KeyboardInterrupt while importing {m}: the module runs code when imported"),
])
def test_a_reward_module_that_exits_while_imported_is_one_line(tmp_path, monkeypatch, capsys, source, says):
    name = f"exits_{abs(hash(source))}"
    _module(tmp_path, monkeypatch, name, source + "def score(response, row):\n    return 1.0\n")
    with pytest.raises(RewardError, match=rf"^reward {name}:score does not import \(" + says.format(m=name)):
        reward(f"{name}:score")
    assert capsys.readouterr().err == ""  # argparse's usage, which names launch.py, is not printed


def test_a_reward_module_that_is_found_but_raises_is_told_to_be_fixed_not_put_on_the_path(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "broken_reward", "import no_such_dependency_xyz\n")
    _module(tmp_path, monkeypatch, "typo_reward", "def score(response, row)\n    return 1.0\n")
    with pytest.raises(RewardError, match=r"\(ModuleNotFoundError: No module named 'no_such_dependency_xyz'\); fix "
                                          r"broken_reward \(it was found, and raised while imported\)"):
        reward("broken_reward:score")
    with pytest.raises(RewardError, match=r"\(SyntaxError: .*\); fix typo_reward"):
        reward("typo_reward:score")
    with pytest.raises(RewardError, match=r"No module named 'absent_pkg_xyz'\); put absent_pkg_xyz.mod on PYTHONPATH"):
        reward("absent_pkg_xyz.mod:score")


def test_what_a_reward_module_prints_while_it_imports_still_reaches_stderr(tmp_path, monkeypatch, capsys):
    _module(tmp_path, monkeypatch, "chatty_reward", "import sys\nprint('loading', file=sys.stderr)\n"
                                                   "def score(response, row):\n    return 1.0\n")
    reward("chatty_reward:score")
    assert capsys.readouterr().err == "loading\n"


@pytest.mark.parametrize(("raises", "says"), [
    ("import sys; sys.exit(0)", r"raised SystemExit on row 4 of the train split: exit code 0: a reward returns its "
                                r"value, it must not exit"),
    ("raise KeyboardInterrupt('stop')", r"raised KeyboardInterrupt on row 4 of the train split: stop"),
])
def test_a_reward_that_exits_while_scoring_fails_naming_the_row(raises, says):
    def score(response, row):
        exec(raises)

    with pytest.raises(RewardValueError, match=rf"^reward m:f {says}"):
        Reward("m:f", score, takes_row=True).score("x", "y", {}, "row 4 of the train split")


@pytest.mark.parametrize(("source", "says"), [
    ("def score(response):\n    return 1.0\n", r"cannot be called with \(response, row\) \(too many positional"),
    ("def score(response, row, extra):\n    return 1.0\n", r"cannot be called with \(response, row\) \(missing a"),
    ("class score:\n    def __init__(self, response, row):\n        pass\n", r"is a class, not a function"),
])
def test_a_reward_whose_signature_does_not_take_response_and_row_is_refused(tmp_path, monkeypatch, source, says):
    name = f"sig_{abs(hash(source))}"
    _module(tmp_path, monkeypatch, name, source)
    with pytest.raises(RewardError, match=rf"^reward {name}:score {says}"):
        reward(f"{name}:score")


def test_a_builtin_without_arguments_is_refused_and_one_with_defaults_is_not(tmp_path, monkeypatch):
    with pytest.raises(RewardError, match=r"^reward os:getcwd cannot be called with \(response, row\)"):
        reward("os:getcwd")
    _module(tmp_path, monkeypatch, "kw_reward", "def score(response, row=None, *, scale=1.0):\n    return 1.0\n")
    assert reward("kw_reward:score").takes_row


@pytest.mark.parametrize(("name", "says"), [
    ("math_box", "a built-in reward (gsm8k_hash, math_boxed; did you mean math_boxed?) or your own function as "
                 "module:function"),
    ("gsm8k", "did you mean gsm8k_hash?"),
    ("exact", "a built-in reward (gsm8k_hash, math_boxed) or your own function as module:function"),
])
def test_an_unknown_builtin_name_gets_the_closest_one_and_the_list(name, says):
    assert says in reward_name_problem(name)
    with pytest.raises(RewardError, match=rf"^reward '{name}' is not a built-in reward"):
        reward(name)
    assert reward_name_problem("gsm8k_hash") is None and reward_name_problem("pkg.mod:fn") is None


@pytest.mark.parametrize("make", [
    lambda: __import__("numpy").float32(0.25),
    lambda: __import__("numpy").int64(1),
    lambda: __import__("numpy").array(0.25),
    lambda: __import__("torch").tensor(0.25),
    lambda: __import__("fractions").Fraction(1, 4),
], ids=["np.float32", "np.int64", "np-0d", "torch-0d", "fraction"])
def test_numpy_and_torch_scalars_are_numbers(make):
    value = make()
    assert checked(value, "row 0") == float(value)
    assert isinstance(checked(value, "row 0"), float)


@pytest.mark.parametrize("make", [
    lambda: __import__("numpy").bool_(True),
    lambda: __import__("numpy").array([0.5]),
    lambda: __import__("torch").tensor(True),
    lambda: __import__("torch").tensor([0.5]),
    lambda: complex(0.5, 0),
], ids=["np.bool_", "np-1d", "torch-bool", "torch-1d", "complex"])
def test_bools_vectors_and_complex_numbers_are_not_rewards(make):
    with pytest.raises(RewardValueError, match="not a number in"):
        checked(make(), "row 0")


_HANG = """
import sys, time
import facts.reward as r
r.STALL_WARNING_S, r.SCORE_TIMEOUT_S, r.EXIT_GRACE_S, r._Watchdog.POLL_S = 1.0, 2.0, {grace}, 0.05
def hang(response, row):
    {body}
try:
    r.Reward("m:hang", hang, takes_row=True).score("x", "y", {{}}, "row 39 of the train split")
except r.RewardValueError as exc:
    print("caught:", exc)
"""


@pytest.mark.slow  # waits out the (shortened) limits in real time: 3 s each
@pytest.mark.parametrize(("body", "grace", "ends"), [
    ("time.sleep(10**6)", 5.0, "caught"),
    ("while True: pass", 5.0, "caught"),
    ("while True:\n        try:\n            time.sleep(10**6)\n        except BaseException:\n            pass", 0.5,
     "exit"),
], ids=["sleep", "busy", "swallows-the-interrupt"])
def test_a_reward_that_hangs_is_warned_about_then_fails_the_run_naming_the_row(body, grace, ends):
    proc = subprocess.run([sys.executable, "-c", _HANG.format(body=body, grace=grace)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert "proofgrid: warning: reward m:hang has not returned for 1 s on row 39 of the train split (the run fails " \
           "at 2 s)" in proc.stderr, proc.stderr
    cause = "reward m:hang did not return within 2 s on row 39 of the train split: make it faster"
    if ends == "caught":
        assert proc.returncode == 0 and proc.stdout.startswith(f"caught: {cause}"), (proc.stdout, proc.stderr)
    else:  # it cannot be interrupted: the process ends, its last line the cause
        assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith(f"RewardValueError: {cause}")


def test_a_reward_that_returns_in_time_leaves_no_warning_and_builtins_are_not_watched():
    scorer = Reward("m:f", lambda response, row: 0.5, takes_row=True)
    assert [scorer.score("x", "y", {}, f"row {i}") for i in range(3)] == [0.5] * 3
    assert reward("gsm8k_hash").score("it is 4", "4", None, "row 0") == 1.0
