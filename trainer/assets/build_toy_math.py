"""Build the second embedded workload ("toy_math"): math word problems answered in ``\\boxed{}``, asked in a chat
format, and a tiny Qwen3-architecture model whose tokenizer carries a chat template.

Why: the chat template (``workload.prompt.chat``), JSON Lines data with a field map and the ``math_boxed`` reward
(math-verify) must run end to end on a CPU with no downloads, as the toy runs the GSM8K shape. Like
``build_toy``, this script produces everything from fixed seeds and the installed libraries only, so anyone can
rebuild the committed files byte for byte and check them against ``manifests/toy_math.json``.

What it writes (default ``--out trainer/assets/toy_math``):

``data/train.jsonl``, ``data/test.jsonl``
    One JSON object per line (sorted keys, UTF-8): ``problem`` (the question), ``solution`` (the worked steps and
    ``\\boxed{<result>}``) and ``answer`` (the result alone, the label ``math_boxed`` compares with). The problems
    are ``build_toy``'s six templates drawn from another seed; test and train are disjoint by problem text.
``model/``
    A word-level tokenizer (digits one token each, a leading space kept in its piece, a concatenating decoder),
    with the chat tokens ``<|im_start|>`` and ``<|im_end|>`` (the EOS) and a Qwen3-style chat template
    (``chat_template.jinja``) that reads ``enable_thinking``: ``false`` closes an empty ``<think>`` block in the
    generation prompt, as Qwen3's does. A tiny ``Qwen3ForCausalLM`` (``head_dim=32``, float32, tied embeddings)
    warm-started on the train split's chat prompts (rendered by ``trainer.prompts`` with ``TASK``, exactly as the
    trainer renders them) with the response ``solution + <|im_end|>``: first on the true solutions, then on
    solutions with arithmetic slips (``build_toy.noisy_answer``), so that sampled at temperature 1 it is often
    wrong while it knows the format; the room a short RL run uses (pass@1 rises: ``docs/workloads.md``).

With ``--write-manifest`` it also writes ``manifests/toy_math.json``.

Usage: ``python -m trainer.assets.build_toy_math [--out trainer/assets/toy_math] [--write-manifest]``
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from facts.repo import MANIFESTS_DIR, REPO_ROOT
from facts.splits import SplitRow
from facts.task import Task
from trainer.assets import build_toy

DEFAULT_OUT = Path(__file__).resolve().parent / "toy_math"
DATA_DIR, MODEL_DIR = build_toy.TOY_DATA_DIR, build_toy.TOY_MODEL_DIR
DEFAULT_MANIFEST = MANIFESTS_DIR / "toy_math.json"

DATA_SEED, MODEL_SEED = 20250317, 2718  # the toy's split sizes (build_toy.N_TRAIN, N_TEST), from other seeds
PAD, EOS, UNK, IM_START = "<|pad|>", "<|im_end|>", "<|unk|>", "<|im_start|>"
# What conf/workload/toy_math.yaml states: the task the model is warm-started on (tests/trainer hold them equal).
SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."
TASK = {"data": {"prompt_field": "problem", "answer_field": "answer", "messages_field": None},
        "prompt": {"template": "{problem}", "chat": True, "system": SYSTEM, "enable_thinking": False},
        "reward": "math_boxed"}
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)
# As the toy's, plus the chat markup: "<", "|", ">" and the words come apart as the pattern says.
PRETOKENIZE_PATTERN = build_toy.PRETOKENIZE_PATTERN
MODEL_CONFIG = {**build_toy.MODEL_CONFIG, "head_dim": 32}  # vLLM's CPU build takes head_dim 32, not the toy's 24

SFT_STEPS = 900
SFT_CLEAN_STEPS = 650
SFT_SLIP = 0.45


def solution(answer: str) -> str:
    """The toy's GSM8K-form answer (steps, then ``#### r``) as a boxed solution: the steps, then ``\\boxed{r}``."""
    *steps, final = answer.split("\n")
    return "\n".join(steps) + "\n\\boxed{" + final.removeprefix("#### ").strip() + "}"


def make_dataset(seed: int = DATA_SEED) -> tuple[list[dict], list[dict]]:
    train, test = build_toy.make_dataset(seed, build_toy.N_TRAIN, build_toy.N_TEST)

    def rows(pairs):
        return [{"problem": q, "solution": solution(a), "answer": a.rsplit("#### ", 1)[1]} for q, a in pairs]

    return rows(train), rows(test)


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


def build_tokenizer(texts: list[str]):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated")
    pieces: set[str] = set()
    for t in texts:
        for chunk in t.replace(IM_START, "\n").replace(EOS, "\n").split("\n"):
            pieces.update(p for p, _ in pre.pre_tokenize_str(chunk))
    for ch in "0123456789-.,+*/=#{}\\":
        pieces.update({ch, " " + ch})
    pieces.update({" ", "\n"})
    vocab = {PAD: 0, EOS: 1, UNK: 2, IM_START: 3}
    for p in sorted(pieces):
        vocab[p] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (PAD, EOS, UNK, IM_START)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        padding_side="left", clean_up_tokenization_spaces=False, model_max_length=256,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def prompts_of(rows: list[dict], tokenizer) -> list[str]:
    """Each row's prompt exactly as the trainer renders it (``TASK``, ``trainer.prompts``)."""
    from trainer.prompts import PromptRenderer

    renderer = PromptRenderer(Task.of(TASK), tokenizer)
    return [renderer.render(SplitRow(i, r["problem"], r["answer"], r)) for i, r in enumerate(rows)]


def slipped_solution(row: dict, rng: random.Random | None) -> str:
    """A row's solution as the warm start's target: with arithmetic slips drawn from ``rng`` when one is given
    (``build_toy.noisy_answer`` on its GSM8K form)."""
    if rng is None:
        return row["solution"]
    gsm = row["solution"].rsplit("\n", 1)[0] + f"\n#### {row['answer']}"
    return solution(build_toy.noisy_answer(gsm, rng, SFT_SLIP))


def write_manifest(out: Path, manifest: Path = DEFAULT_MANIFEST) -> None:
    """``manifests/toy_math.json``, written by the project's pinning command (``trainer.inputs.pin``)."""
    from trainer.inputs import pin

    rel = out.resolve().relative_to(REPO_ROOT.resolve())
    pin(manifest.stem, [(rel / DATA_DIR).as_posix(), (rel / MODEL_DIR).as_posix()], manifest.parent)


def build(out: Path, sft_steps: int = SFT_STEPS) -> None:
    build_toy.set_determinism(MODEL_SEED)
    train, test = make_dataset()
    write_jsonl(train, out / DATA_DIR / "train.jsonl")
    write_jsonl(test, out / DATA_DIR / "test.jsonl")

    bare = build_tokenizer([])  # renders the chat template (its vocabulary plays no part in the text)
    rendered = prompts_of(train + test, bare)
    tokenizer = build_tokenizer([p + r["solution"] for p, r in zip(rendered, train + test)])
    prompts = prompts_of(train, tokenizer)
    model = build_toy.build_model(tokenizer, MODEL_SEED, MODEL_CONFIG)
    batches = build_toy.sft_batches(tokenizer, train, build_toy.SFT_BATCH, MODEL_SEED, slip=SFT_SLIP,
                                    slip_from=SFT_CLEAN_STEPS, prompts=prompts, target=slipped_solution)
    build_toy.sft(model, tokenizer, train, steps=sft_steps, seed=MODEL_SEED, batches=batches)

    build_toy.save_model(model, tokenizer, out)


def main(argv: list[str] | None = None) -> None:
    build_toy.cli(argv, __doc__.split("\n\n")[0], DEFAULT_OUT, DEFAULT_MANIFEST, build, write_manifest, SFT_STEPS)


if __name__ == "__main__":
    main()
