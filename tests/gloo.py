"""Run a function on N real processes joined in a real gloo process group.

``run_gloo(fn, world_size, tmp_path, *args)`` spawns ``world_size`` processes; each calls
``fn(rank, world_size, group, *args)`` after ``init_process_group("gloo")`` with a file store
(no TCP port to race for). Each rank's return value is pickled to a file and returned to the
caller as a list indexed by rank; an exception in any rank fails the caller.
"""

from __future__ import annotations

import os
import pickle
import traceback
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world_size, store_file, out_dir, fn, args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world_size)
    try:
        result = ("ok", fn(rank, world_size, dist.group.WORLD, *args))
    except BaseException as exc:  # report to the parent instead of hanging the peer
        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_gloo(fn, world_size: int, tmp_path: Path, *args):
    store = tmp_path / "gloo-store"
    out = tmp_path / "gloo-out"
    out.mkdir(exist_ok=True)
    mp.start_processes(_worker, args=(world_size, str(store), str(out), fn, args), nprocs=world_size,
                       join=True, start_method="spawn")
    results = []
    for rank in range(world_size):
        status, value = pickle.loads((out / f"rank{rank}.pkl").read_bytes())
        if status != "ok":
            raise AssertionError(f"rank {rank} failed:\n{value}")
        results.append(value)
    return results
