"""A checkpoint's weights file is the same bytes for the same weights, whatever order safetensors' Rust writer
happens to give its metadata (a reproducibility certificate compares checkpoint digests)."""

from __future__ import annotations

import hashlib
import json

import torch
from safetensors.torch import load_file

from facts.files import WEIGHTS_FILE
from trainer.checkpoint import save_checkpoint, sort_header_metadata


class TiedModel(torch.nn.Module):
    """An embedding whose weight the output head shares, as the toy Qwen3's lm_head does."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight
        self.norm = torch.nn.LayerNorm(3)


def _header(path):
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + size]), raw


def test_the_same_weights_give_the_same_bytes_every_save(tmp_path):
    torch.manual_seed(0)
    model = TiedModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    digests = set()
    for i in range(10):  # each save is a new Rust HashMap: its own random order of the two metadata keys
        ckpt = save_checkpoint(tmp_path / str(i), 1, model, optimizer, {"cursor": 0})
        weights = ckpt / WEIGHTS_FILE
        digests.add(hashlib.sha256(weights.read_bytes()).hexdigest())
        header, _ = _header(weights)
        assert list(header["__metadata__"]) == sorted(header["__metadata__"])
    assert len(digests) == 1


def test_sorting_permutes_the_header_and_keeps_every_tensor(tmp_path):
    torch.manual_seed(1)
    model = TiedModel()
    path = save_checkpoint(tmp_path, 1, model, torch.optim.SGD(model.parameters(), lr=0.1), {}) / WEIGHTS_FILE
    header, raw = _header(path)
    size = int.from_bytes(raw[:8], "little")
    # write the metadata in reverse order, as the Rust writer may, then sort it again
    reverse = {**header, "__metadata__": dict(reversed(list(header["__metadata__"].items())))}
    text = json.dumps(reverse, separators=(",", ":")).encode()
    path.write_bytes(raw[:8] + text + raw[8 + len(text):])
    assert path.read_bytes() != raw
    sort_header_metadata(path)
    assert path.read_bytes() == raw
    expected = {k: v for k, v in model.state_dict().items() if k != "head.weight"}
    loaded = load_file(path)
    assert set(loaded) == set(expected) and all(torch.equal(loaded[k], expected[k]) for k in expected)
    assert int.from_bytes(path.read_bytes()[:8], "little") == size
