"""The prompt of a data row (``workload.prompt``, ``facts.task``): a format string over the row's fields, or the
tokenizer's own chat template applied to the conversation with ``add_generation_prompt=True``.

One renderer for every place a prompt is made: the training rollouts and the evaluation (``trainer.data``), the
TRL adapter's dataset and the launcher's dry run (the first rows' prompts). A chat prompt is made by the
tokenizer's ``apply_chat_template`` (transformers' public API) with the model directory's own template; Qwen3's
``enable_thinking`` is passed only to a template that reads it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from facts.splits import SplitRow
from facts.task import Task, TemplateError, template_fields
from trainer.trainer_errors import TrainerError

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # transformers 5 keeps a tokenizer's chat template beside its config
TOKENIZER_CONFIG = "tokenizer_config.json"
THINKING_VARIABLE = "enable_thinking"


class PromptError(TrainerError, ValueError):
    """A prompt setting that cannot be rendered (one line: the setting, the model or row, and the fix)."""


def chat_template_text(model_dir: str | Path) -> str | None:
    """The chat template a model directory's tokenizer carries (its ``chat_template.jinja``, or the
    ``chat_template`` of ``tokenizer_config.json``), None without one; read without loading the tokenizer."""
    model_dir = Path(model_dir)
    if (model_dir / CHAT_TEMPLATE_FILE).is_file():
        return (model_dir / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    try:
        config = json.loads((model_dir / TOKENIZER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) and template.strip() else None


PREVIEW_CHARS = 400  # the dry run shows this much of a rendered prompt, then its length


def preview(prompt: str) -> str:
    """A rendered prompt as the dry run shows it: its ``repr``, cut at ``PREVIEW_CHARS`` with its length said."""
    if len(prompt) <= PREVIEW_CHARS:
        return repr(prompt)
    return f"{prompt[:PREVIEW_CHARS]!r}… ({len(prompt):,} characters)"


def _check_template(task: Task, fields: list[str], split: str) -> None:
    """A template names a field ``split`` has (``fields``: those its rows have), at least one, and not the answer."""
    named = template_fields(task.template)
    missing = [name for name in named if name not in fields]
    if missing:
        raise PromptError(f"workload.prompt.template names {{{missing[0]}}}, which {split} does not have; its fields "
                          f"are {', '.join(fields)}")
    if not named:
        escaped = [name for name in re.findall(r"\{\{(\w+)\}\}", task.template) if name in fields]
        fix = (f"write {{{escaped[0]}}}, not {{{{{escaped[0]}}}}} (a doubled brace is a literal one)" if escaped else
               f"name the prompt field in it ({{{task.fields.prompt_field or fields[0]}}})")
        raise PromptError(f"workload.prompt.template {task.template!r} names no field of the row, so every prompt "
                          f"is the same; {fix}")
    if task.fields.answer_field in named:
        raise PromptError(f"workload.prompt.template names {{{task.fields.answer_field}}}, the answer "
                          "(workload.data.answer_field): the answer would be in the prompt; drop it from the template")


def check_prompt(task: Task, model_dir: str | Path, fields: list[str], split: str) -> None:
    """What can be refused about a task's prompt before anything runs: a template naming a field ``split`` lacks
    (``fields``: the fields its rows have), no field at all (every prompt the same) or the answer field, a template
    with chat data, a chat prompt for a tokenizer without a chat template, ``enable_thinking`` for a template that
    does not read it. Each row is then rendered (``PromptRenderer.render_rows``): a row that lacks a field, or that
    the chat template refuses, is named there."""
    if task.fields.messages_field is not None and task.template is not None:
        raise PromptError("workload.data.messages_field gives each row's conversation as it is, so workload.prompt.template "
                          "has nothing to fill: set workload.prompt.template=null")
    if task.fields.messages_field is not None and not task.chat:
        raise PromptError("workload.data.messages_field holds chat conversations: set workload.prompt.chat=true (the "
                          "tokenizer's chat template renders them)")
    if task.template is not None:
        _check_template(task, fields, split)
    elif not task.chat:
        raise PromptError("workload.prompt.template is null and workload.prompt.chat is false: a prompt needs one; set "
                          "a template (\"Question: {question}\\nAnswer:\") or chat=true")
    if not task.chat:
        for key in ("system", "enable_thinking"):
            if task.prompt.get(key) is not None:
                raise PromptError(f"workload.prompt.{key} applies to a chat prompt; set workload.prompt.chat=true or "
                                  f"workload.prompt.{key}=null")
        return
    template = chat_template_text(model_dir)
    if template is None:
        raise PromptError(f"workload.prompt.chat=true but the tokenizer of {model_dir} has no chat template "
                          f"({CHAT_TEMPLATE_FILE} or chat_template in {TOKENIZER_CONFIG}); use workload.prompt.template, "
                          "or a model whose tokenizer has one")
    if task.prompt.get("enable_thinking") is not None and THINKING_VARIABLE not in template:
        raise PromptError(f"workload.prompt.enable_thinking={str(task.prompt['enable_thinking']).lower()} but the chat "
                          f"template of {model_dir} does not read {THINKING_VARIABLE}; set it to null")


class PromptRenderer:
    """Renders a split row's prompt as the workload says (``render``); a chat prompt needs the tokenizer."""

    def __init__(self, task: Task, tokenizer=None):
        self.task = task
        self.tokenizer = tokenizer
        if task.chat and tokenizer is None:
            raise PromptError("a chat prompt is rendered by the model's tokenizer; load it first")
        self._kwargs = {}
        if task.chat and task.prompt.get("enable_thinking") is not None:
            self._kwargs[THINKING_VARIABLE] = bool(task.prompt["enable_thinking"])

    def messages(self, row: SplitRow) -> list[dict]:
        """The conversation of a chat prompt: the system message (if any), then the row's messages or its user
        message (the template filled, or the prompt field)."""
        task = self.task
        if task.fields.messages_field is not None:
            conversation = json.loads(row.question)
        else:
            text = self._fill(row) if task.template is not None else row.question
            conversation = [{"role": "user", "content": text}]
        system = task.prompt.get("system")
        if system is not None and not any(m.get("role") == "system" for m in conversation):
            conversation = [{"role": "system", "content": system}, *conversation]
        return conversation

    def _fill(self, row: SplitRow) -> str:
        try:
            return self.task.template.format(**row.row)
        except KeyError as exc:
            raise PromptError(f"row {row.index} has no field {exc.args[0]!r} that workload.prompt.template names: "
                              "fill it in every row, or drop it from the template") from None
        except (IndexError, AttributeError, ValueError, TypeError) as exc:
            raise PromptError(f"workload.prompt.template cannot be filled from row {row.index} ({type(exc).__name__}: "
                              f"{exc})") from None

    def render(self, row: SplitRow) -> str:
        if not self.task.chat:
            return self._fill(row)
        messages = self.messages(row)
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **self._kwargs)
        except Exception as exc:  # the model's own Jinja template may raise anything (raise_exception, a bad role)
            raise PromptError(f"row {row.index}'s conversation is refused by the tokenizer's chat template "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): change the "
                              "row's messages, or use a model whose template takes them") from None

    def render_rows(self, rows: list[SplitRow], source: str | Path) -> list[str]:
        """Every row's prompt; ``PromptError`` naming ``source`` (the split's file) and the row that cannot be."""
        try:
            return [self.render(r) for r in rows]
        except PromptError as exc:
            raise PromptError(f"{source}: {exc}") from None


def load_tokenizer(model_dir: str | Path):
    """The model directory's tokenizer (local files only), for rendering chat prompts outside the trainer."""
    from transformers import AutoTokenizer  # here: only a chat prompt's dry run or adapter loads transformers

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


__all__ = ["PromptError", "PromptRenderer", "TemplateError", "chat_template_text", "check_prompt", "load_tokenizer",
           "preview"]
