"""Build the embedded default ("toy") workload: dataset, tokenizer and a tiny warm-started Qwen3 model.

Why: proofgrid must run its RL post-training sweep (GRPO / REINFORCE++) on a CPU with no downloads.
This script produces, from fixed seeds and nothing but the installed libraries, everything that
workload needs, so anyone can rebuild the committed files and check them against
``manifests/toy.json``.

What it writes (default ``--out trainer/assets/toy``):

``data/train.parquet``, ``data/test.parquet``
    GSM8K-shaped synthetic word problems (columns ``question``, ``answer``; the answer is a terse
    worked rationale ending in ``"\\n#### <number>"``). Six templates, one or two operations
    (+, -, *, /) on small integers, random names/objects. Test and train are disjoint by question
    text. Written with pyarrow with fixed options (no timestamps), so rebuilds are byte-identical.
``model/``
    ``tokenizer.json`` + ``tokenizer_config.json``: a word-level tokenizer (``tokenizers`` library)
    whose pre-tokenizer splits every digit into its own token and keeps a leading space inside the
    token, with a concatenating decoder, so ``decode(encode(text)) == text``. Special tokens:
    ``<|pad|>`` (0), ``<|endoftext|>`` (1, EOS), ``<|unk|>`` (2); no BOS, nothing added automatically.
    ``config.json``, ``generation_config.json``, ``model.safetensors``: a tiny ``Qwen3ForCausalLM``
    (float32, tied embeddings) given a short supervised warm start on the train split: loss on the
    response tokens ``" " + answer + <|endoftext|>`` only, AdamW with warmup + cosine decay, fixed
    seeds, single thread, ``torch.use_deterministic_algorithms(True)``. The warm start has two
    phases: ``SFT_CLEAN_STEPS`` steps on the true answers (the model learns the format and most of
    the arithmetic), then the remaining steps on answers with *arithmetic slips* (each step's result
    is off by 1..3 with probability ``SFT_SLIP``; see ``noisy_answer``). The result is a model that
    knows the format and usually knows the right result (greedy accuracy ~0.7) but hedges: sampled at
    temperature 1.0 it is right only ~30% of the time. That is the room RL is meant to use: a
    group-mean baseline can sharpen it (the sweep's initial-checkpoint control measures it). The parquet labels are
    always the true answers; the slips exist only inside this build.
    Loads with ``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained(path)``.

With ``--write-manifest`` it also writes ``manifests/toy.json`` (path relative to the repo root,
size and sha256 of every file above, sorted by path). The base model's pass@1 is what every run's
``eval.json`` reports as its ``initial`` checkpoint.

Usage: ``python -m trainer.assets.build_toy [--out trainer/assets/toy] [--write-manifest]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import time
from pathlib import Path

from facts.repo import MANIFESTS_DIR, REPO_ROOT
from trainer.data import PROMPT_TEMPLATE

DEFAULT_OUT = Path(__file__).resolve().parent / "toy"
# The toy asset's own layout (conf/workload/toy.yaml and manifests/toy.json name these paths).
TOY_DATA_DIR, TOY_MODEL_DIR = "data", "model"
DEFAULT_MANIFEST = MANIFESTS_DIR / "toy.json"

DATA_SEED = 20240601
MODEL_SEED = 1729
N_TRAIN = 4000
N_TEST = 256

PAD, EOS, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"
# Pieces: newline | "####" | word | one digit | one other symbol | runs of spaces; an optional leading
# space stays inside the piece so that the concatenating decoder restores the text exactly.
PRETOKENIZE_PATTERN = r"\n| ?####| ?[A-Za-z]+| ?\d| ?[^\sA-Za-z\d]| +"

MODEL_CONFIG = dict(
    hidden_size=96,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,  # vLLM's CPU attention refuses 24 (workload.engine=vllm); 32 it runs
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

SFT_STEPS = 1000
SFT_BATCH = 64
SFT_LR = 3e-3
SFT_WARMUP = 20
SFT_MIN_LR_FRAC = 0.1
SFT_SLIP = 0.42
SFT_CLEAN_STEPS = 750

NAMES = ["Tom", "Anna", "Ben", "Lisa", "Sam", "Maria", "Jack", "Emma", "Leo", "Mia", "Noah", "Zoe"]
OBJECTS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells", "coins",
           "flowers"]


# ----------------------------------------------------------------------------------------------
# dataset


def format_prompt(question: str) -> str:
    return PROMPT_TEMPLATE.format(question=question)


def format_target(answer: str) -> str:
    """The SFT continuation of the prompt (the EOS token is appended separately)."""
    return " " + answer


def _problem(rng: random.Random) -> tuple[str, str]:
    """One (question, answer) pair; answer = rationale lines + "\\n#### <result>"."""
    kind = rng.randrange(6)
    n = rng.choice(NAMES)
    m = rng.choice([x for x in NAMES if x != n])
    o = rng.choice(OBJECTS)
    if kind == 0:
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        r = a + b
        q = f"{n} has {a} {o} and buys {b} more. How many {o} does {n} have now?"
        steps = [f"{a} + {b} = {r}"]
    elif kind == 1:
        a = rng.randint(5, 25)
        b = rng.randint(2, a - 1)
        r = a - b
        q = f"{n} has {a} {o} and gives {b} to {m}. How many {o} does {n} have left?"
        steps = [f"{a} - {b} = {r}"]
    elif kind == 2:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        r = a * b
        q = f"{n} buys {a} bags of {o}. Each bag has {b} {o}. How many {o} does {n} buy?"
        steps = [f"{a} * {b} = {r}"]
    elif kind == 3:
        b, r = rng.randint(2, 9), rng.randint(2, 9)
        a = b * r
        q = f"{n} shares {a} {o} equally among {b} friends. How many {o} does each friend get?"
        steps = [f"{a} / {b} = {r}"]
    elif kind == 4:
        a, b = rng.randint(2, 15), rng.randint(2, 15)
        s = a + b
        c = rng.randint(1, s - 1)
        r = s - c
        q = f"{n} has {a} {o}, finds {b} more and then gives {c} to {m}. How many {o} does {n} have now?"
        steps = [f"{a} + {b} = {s}", f"{s} - {c} = {r}"]
    else:
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 10)
        s = a * b
        r = s + c
        q = f"{n} has {a} boxes with {b} {o} in each box and {c} more {o}. How many {o} does {n} have in total?"
        steps = [f"{a} * {b} = {s}", f"{s} + {c} = {r}"]
    return q, "\n".join(steps) + f"\n#### {r}"


def make_dataset(seed: int = DATA_SEED, n_train: int = N_TRAIN, n_test: int = N_TEST):
    """Unique questions drawn i.i.d.; the first ``n_test`` form the test split, the rest train."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[tuple[str, str]] = []
    while len(rows) < n_train + n_test:
        q, a = _problem(rng)
        if q in seen:
            continue
        seen.add(q)
        rows.append((q, a))
    return rows[n_test:], rows[:n_test]


def write_parquet(rows: list[tuple[str, str]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"question": pa.array([q for q, _ in rows], pa.string()),
         "answer": pa.array([a for _, a in rows], pa.string())}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", compression_level=9, use_dictionary=False,
                   row_group_size=len(rows), write_statistics=False, version="2.6",
                   data_page_version="1.0")


# ----------------------------------------------------------------------------------------------
# tokenizer


def build_tokenizer(texts: list[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated")
    pieces: set[str] = set()
    for t in texts:
        pieces.update(p for p, _ in pre.pre_tokenize_str(t))
    # Always have every digit and the usual number punctuation, with and without a leading space.
    for ch in "0123456789-.,+*/=#":
        pieces.update({ch, " " + ch})
    pieces.update({" ", "\n"})
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for p in sorted(pieces):
        vocab[p] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        padding_side="left", clean_up_tokenization_spaces=False, model_max_length=256,
    )
    return fast


# ----------------------------------------------------------------------------------------------
# model


def set_determinism(seed: int) -> None:
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(seed)
    torch.manual_seed(seed)


def build_model(tokenizer, seed: int = MODEL_SEED, model_config: dict | None = None):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **(model_config or MODEL_CONFIG),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x // y}


def noisy_answer(answer: str, rng: random.Random, p: float) -> str:
    """The answer with arithmetic slips: each step's result is replaced, with probability ``p``, by a
    nearby wrong value (off by 1..3); later steps use the slipped value; the final line follows."""
    out: list[str] = []
    true_prev = prev = None
    for line in answer.split("\n")[:-1]:
        a_s, op, b_s = line.split(" = ")[0].split(" ")
        a, b = int(a_s), int(b_s)
        a_used = prev if prev is not None and a == true_prev else a
        true_r, r = _OPS[op](a, b), _OPS[op](a_used, b)
        if rng.random() < p:
            r += rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if r + d >= 0])
        out.append(f"{a_used} {op} {b} = {r}")
        true_prev, prev = true_r, r
    return "\n".join(out) + f"\n#### {prev}"


def sft_batches(tokenizer, rows, batch_size: int, seed: int, slip: float = 0.0, slip_from: int = 0,
                prompts: list[str] | None = None, target=None):
    """Endless deterministic stream of (input_ids, attention_mask, labels), right-padded; from batch
    ``slip_from`` on, targets get arithmetic slips with probability ``slip`` per step. ``prompts``: each row's
    prompt text (default: the toy's template of its question); ``target(row, rng)``: its response text, with
    slips drawn from ``rng`` when one is given (default: the toy's answer, ``noisy_answer``)."""

    def enc(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if target is None:
        def target(row, rng):
            return format_target(noisy_answer(row[1], rng, slip) if rng is not None else row[1])

    prompts = [enc(p) for p in (prompts if prompts is not None else [format_prompt(q) for q, _ in rows])]
    targets = [enc(target(row, None)) + [tokenizer.eos_token_id] for row in rows]
    rng = random.Random(seed)
    order: list[int] = []
    step = 0
    while True:
        if len(order) < batch_size:
            perm = list(range(len(rows)))
            rng.shuffle(perm)
            order.extend(perm)
        idx, order = order[:batch_size], order[batch_size:]
        seqs = []
        for i in idx:
            r = targets[i]
            if slip > 0 and step >= slip_from:
                r = enc(target(rows[i], rng)) + [tokenizer.eos_token_id]
            seqs.append((prompts[i], r))
        yield collate(seqs, tokenizer.pad_token_id)
        step += 1


def collate(seqs: list[tuple[list[int], list[int]]], pad_id: int):
    """(input_ids, attention_mask, labels) of (prompt, response) token lists, right-padded: the loss on the
    response tokens only."""
    import torch

    L = max(len(p) + len(r) for p, r in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    labels = torch.full((len(seqs), L), -100, dtype=torch.long)
    for j, (p, r) in enumerate(seqs):
        n = len(p) + len(r)
        ids[j, :n] = torch.tensor(p + r)
        mask[j, :n] = 1
        labels[j, len(p):n] = torch.tensor(r)
    return ids, mask, labels


def sft(model, tokenizer, rows, steps: int = SFT_STEPS, seed: int = MODEL_SEED, log_every: int = 100,
        callback=None, batches=None):
    """The warm start: AdamW with warmup and cosine decay on ``batches`` (default: ``sft_batches`` of ``rows``)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=SFT_LR, betas=(0.9, 0.95), weight_decay=0.0)

    def schedule(s: int) -> float:
        if s < SFT_WARMUP:
            return (s + 1) / SFT_WARMUP
        return SFT_MIN_LR_FRAC + (1 - SFT_MIN_LR_FRAC) * 0.5 * (1 + math.cos(math.pi * (s - SFT_WARMUP) / max(1, steps - SFT_WARMUP)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    if batches is None:
        batches = sft_batches(tokenizer, rows, SFT_BATCH, seed, slip=SFT_SLIP, slip_from=SFT_CLEAN_STEPS)
    t0 = time.perf_counter()
    for step in range(steps):
        ids, mask, labels = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if log_every and (step + 1) % log_every == 0:
            print(f"sft step {step + 1}/{steps} loss {loss.item():.4f} ({time.perf_counter() - t0:.1f}s)",
                  flush=True)
        if callback is not None:
            callback(step + 1, model)
    model.eval()
    return model


# ----------------------------------------------------------------------------------------------
# manifest


def file_entries(out: Path, root: Path = REPO_ROOT) -> list[dict]:
    files = sorted(p for sub in (TOY_DATA_DIR, TOY_MODEL_DIR) for p in (out / sub).rglob("*") if p.is_file())
    entries = []
    for p in files:
        data = p.read_bytes()
        entries.append({"path": p.resolve().relative_to(root.resolve()).as_posix(), "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    return sorted(entries, key=lambda e: e["path"])


def write_manifest(out: Path, manifest: Path = DEFAULT_MANIFEST) -> None:
    doc = {"workload": "toy", "files": file_entries(out)}
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(doc, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------


def build(out: Path, sft_steps: int = SFT_STEPS) -> None:
    set_determinism(MODEL_SEED)
    train, test = make_dataset()
    write_parquet(train, out / TOY_DATA_DIR / "train.parquet")
    write_parquet(test, out / TOY_DATA_DIR / "test.parquet")

    texts = [format_prompt(q) + format_target(a) for q, a in train + test]
    tokenizer = build_tokenizer(texts)
    model = build_model(tokenizer)
    sft(model, tokenizer, train, steps=sft_steps)

    save_model(model, tokenizer, out)


def save_model(model, tokenizer, out: Path) -> None:
    """The model and tokenizer into ``out/model`` (replacing it), readable by all like the data files."""
    model_dir = out / TOY_MODEL_DIR
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    # transformers 5 records its internal class name; "PreTrainedTokenizerFast" loads the same
    # tokenizer.json under transformers 4.x and 5.x alike.
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    for p in sorted((out / TOY_DATA_DIR).iterdir()) + sorted(model_dir.iterdir()):
        p.chmod(0o644)  # safetensors writes 0600


def cli(argv: list[str] | None, description: str, out: Path, manifest: Path, build_fn, manifest_fn,
        sft_steps: int) -> None:
    """An asset builder's command line: ``--out``, ``--write-manifest`` (``--manifest``), ``--sft-steps``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", type=Path, default=out)
    ap.add_argument("--write-manifest", action="store_true", help=f"also write {manifest.relative_to(REPO_ROOT)}")
    ap.add_argument("--manifest", type=Path, default=manifest)
    ap.add_argument("--sft-steps", type=int, default=sft_steps, help="the warm start's steps (a test builds a few)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    build_fn(args.out, args.sft_steps)
    print(f"built {args.out} in {time.perf_counter() - t0:.1f}s")
    if args.write_manifest:
        manifest_fn(args.out, args.manifest)
        print(f"wrote {args.manifest}")


def main(argv: list[str] | None = None) -> None:
    cli(argv, __doc__.split("\n\n")[0], DEFAULT_OUT, DEFAULT_MANIFEST, build, write_manifest, SFT_STEPS)


if __name__ == "__main__":
    main()
