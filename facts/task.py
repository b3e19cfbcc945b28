"""A workload's task, stated once: its data's field map (``workload.data``), its prompt (``workload.prompt``) and
its reward (``workload.reward``), with the embedded default's values. The trainer, the launcher's plan-time
checks and the evidence all read a workload's task here.

``workload.prompt``:

``template``         a format string over the row's fields (``"Question: {question}\\nAnswer:"``, the default);
                     with ``chat: true`` it makes the user message (null: the prompt field as it is)
``chat``             true: the prompt is the tokenizer's own chat template applied to [system, user] messages
                     (or the row's messages, ``workload.data.messages_field``) with ``add_generation_prompt``
``system``           the system message of a chat prompt (null: none)
``enable_thinking``  passed to the chat template when it reads it (Qwen3's); null: the template's default

The prompt's SHA256 (``prompt_sha256``: of these four settings' canonical JSON) is recorded in run.json's
``task``: two runs with different prompts ran different workloads, and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field

from facts.reward import DEFAULT_REWARD
from facts.splits import DEFAULT_FIELDS, Fields

DEFAULT_TEMPLATE = "Question: {question}\nAnswer:"
DEFAULT_PROMPT = {"template": DEFAULT_TEMPLATE, "chat": False, "system": None, "enable_thinking": None}
TASK_FIELD = "task"  # run.json's record of the task (and an evaluation identity's, when not the default)


class TemplateError(ValueError):
    """A prompt template that is not a format string over field names (one line: the template and the fix)."""


def template_fields(template: str) -> list[str]:
    """The row fields a format string names, in order (``{a}``, ``{a.b}`` and ``{a[0]}`` name ``a``)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"workload.prompt.template {template!r} is not a format string ({exc}); write fields as "
                            "{name} and a literal brace as {{ or }}") from None
    names = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        head = name.split(".")[0].split("[")[0]
        if not head or head.isdigit():
            raise TemplateError(f"workload.prompt.template {template!r} has a positional field {{{name}}}; name a "
                                "field of the row ({question})")
        if head not in names:
            names.append(head)
    return names


@dataclass(frozen=True)
class Task:
    fields: Fields = Fields()
    prompt: dict = field(default_factory=lambda: dict(DEFAULT_PROMPT))
    reward: str = DEFAULT_REWARD

    @classmethod
    def of(cls, workload) -> Task:
        """A workload's task from its settings (a mapping; settings it leaves out are the defaults)."""
        get = workload.get
        prompt = {**DEFAULT_PROMPT, **{k: v for k, v in dict(get("prompt") or {}).items() if k in DEFAULT_PROMPT}}
        return cls(Fields.of(get("data")), prompt, str(get("reward") or DEFAULT_REWARD))

    @property
    def template(self) -> str | None:
        return self.prompt["template"]

    @property
    def chat(self) -> bool:
        return bool(self.prompt["chat"])

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.prompt, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def is_default(self) -> bool:
        """The embedded default's task (today's prompt, fields and reward): its runs record exactly what they did."""
        return (self.prompt == DEFAULT_PROMPT and self.reward == DEFAULT_REWARD
                and self.fields == Fields(**DEFAULT_FIELDS))

    def settings(self) -> dict:
        """The task's settings as a workload states them (``Task.of(task.settings()) == task``)."""
        return {"data": {"prompt_field": self.fields.prompt_field, "answer_field": self.fields.answer_field,
                         "messages_field": self.fields.messages_field},
                "prompt": dict(self.prompt), "reward": self.reward}

    def record(self, reward_record: dict) -> dict:
        """run.json's ``task``: the field map, the prompt settings and their SHA256, the reward's record."""
        return {**self.settings(), "prompt_sha256": self.prompt_sha256, "reward": reward_record}
