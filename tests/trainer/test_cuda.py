"""GPU checks (``pytest -m cuda``; scripts/device_check.sh runs them): the normaliser and the
reductions on a real one-rank NCCL group equal the group-free results bit for bit without a host
synchronisation, and two identical bfloat16 training runs on the GPU log identical numbers.

Skipped where no CUDA device is visible; tests/trainer/test_no_host_sync.py holds the 100-iteration
``set_sync_debug_mode("error")`` check of the whole numerical core.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from tests.trainer_runs import read_metrics, run_trainer, without_perf

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a visible CUDA device")]


def _batch(device):
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(8, 12, generator=g) < 0.7
    mask[:, 0] = True
    values = torch.randn(8, 12, generator=g, dtype=torch.float64)
    values[~mask] = float("nan")  # padding holds garbage
    return values.to(device), mask.to(device)


def test_one_rank_nccl_group_gives_the_group_free_results_without_a_host_sync(tmp_path):
    from trainer.algorithms import LOSS_REDUCTIONS, masked_global_normalize, reduce_loss

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        values, mask = _batch(device)
        warm = torch.ones(1, device=device)
        dist.all_reduce(warm, group=group)  # communicator set-up may synchronise; the hot path must not
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            grouped = masked_global_normalize(values, mask, group=group)
            reduced = {mode: reduce_loss(values, mask, mode, group=group) for mode in LOSS_REDUCTIONS}
        finally:
            torch.cuda.set_sync_debug_mode("default")
        alone = masked_global_normalize(values, mask)
        for a, b in zip(grouped, alone):
            assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
        for mode, value in reduced.items():
            assert torch.equal(value, reduce_loss(values, mask, mode)), mode
        assert torch.isfinite(grouped[0][mask]).all()
    finally:
        dist.destroy_process_group()


def test_two_identical_bf16_runs_on_the_gpu_log_identical_numbers(tmp_path):
    common = ("algo=rppb", "seed=3", "workload.device=cuda", "workload.dtype=bfloat16", "workload.n_updates=3",
              "workload.eval.n_prompts=4")
    run_trainer(tmp_path / "a", *common)
    run_trainer(tmp_path / "b", *common)
    first, second = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert len(first) == 3 and without_perf(first) == without_perf(second)
    assert first[-1]["perf/peak_mem_gib"] > 0  # it ran on the device (CUDA allocator figures)
    assert (tmp_path / "a" / "eval.json").read_text() == (tmp_path / "b" / "eval.json").read_text()
    config = json.loads((tmp_path / "a" / "run.json").read_text())["config"]["workload"]
    assert (config["device"], config["dtype"]) == ("cuda", "bfloat16")
