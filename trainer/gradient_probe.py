"""``python -m trainer.gradient_probe``: an experiment probe's gradient check — two arms' losses on ONE batch.

    python -m trainer.gradient_probe --out grad.json --baseline "algo=is_pg" --treatment "algo=score_centering" \
        workload.sampler_refresh_every=1 seed=1

One rollout batch is drawn from the initial policy (the sampler holds the policy's own weights, so
staleness is 0), with auxiliary draws when either arm's estimator needs them. Each arm computes its
own advantages and loss on that batch, and its gradient with respect to every policy parameter (before
clipping); the two flattened gradients are compared. ``--out`` receives their norms, the cosine of
the angle between them and the relative difference ``|g_t - g_b| / |g_b|``.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys

import torch
from omegaconf import DictConfig

from facts import atomic_write_json
from facts.process_exit import exit_now
from trainer.algorithms import LossInputs, reduce_loss
from trainer.run_config import compose, validate


def flat_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos(a, b) = a·b / (|a| |b|), in float64; 0 when either vector is zero."""
    a, b = a.double(), b.double()
    denom = float(a.norm() * b.norm())
    return float(a @ b) / denom if denom > 0 else 0.0


def _state(cfg: DictConfig):
    """A ``RunState`` at step 0 of ``cfg``'s run: its policy (with ``workload.lora``'s adapters: the gradients are
    the trained weights'), reference and sampler at the policy's weights, as ``trainer.loop.set_up`` makes them."""
    from trainer.data import PromptStream, load_split, workload_task
    from trainer.inputs import resolve, verify_inputs
    from trainer.loop import RunState, load_models, policy_engine, update_schedule
    from trainer.reward_workers import make_scorer

    algo = validate(cfg)
    w = cfg.workload
    verify_inputs(w.manifest, required=[w.model_path, w.train_path, w.test_path])
    torch.set_num_threads(int(w.num_threads))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(cfg.seed))
    device = torch.device(str(w.device))
    policy, reference, tokenizer, optimizer = load_models(w, device)  # the optimizer is never stepped here
    engine = policy_engine(w, policy, reference, tokenizer)
    task = workload_task(w)
    return RunState(cfg, algo, 0, 1, None, policy, reference, tokenizer, optimizer, engine,
                    PromptStream(load_split(resolve(w.train_path), task, tokenizer), int(cfg.seed)), device,
                    make_scorer(0, 1, task.reward), update_schedule(cfg))


def arm_gradient(s, algo, rollout, lp) -> torch.Tensor:
    """The flattened gradient of ``algo``'s loss (its own advantages and reduction) on the batch ``lp``."""
    from trainer.loop import StepMetrics, advantage_stage

    arm = copy.copy(s)
    arm.algo = algo
    adv = advantage_stage(arm, rollout, lp, 0, StepMetrics(None, s.device))
    mask = lp.batch.response_mask
    inputs = LossInputs(lp.logp, lp.logp_old, lp.logp_sampler, adv.normalized, mask, lp.logp_aux)
    token_loss, _ = arm.estimator.policy_loss_fn(inputs, algo)
    loss = reduce_loss(token_loss, mask, algo.loss_reduction)
    params = [p for p in s.policy.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


def gradient_check(baseline: DictConfig, treatment: DictConfig) -> dict:
    """Both arms' gradients on one staleness-0 batch, and how far apart they are."""
    from trainer.loop import StepMetrics, logprob_stage, rollout_stage

    if (baseline.workload, baseline.seed) != (treatment.workload, treatment.seed):
        raise SystemExit("proofgrid probe: error: the two arms must share workload and seed; "
                         "put only the arms' own settings in --baseline/--treatment")
    algos = {"baseline": validate(baseline), "treatment": validate(treatment)}
    s = _state(baseline)
    # The rollout draws auxiliary tokens when either arm's loss uses them (the other ignores them).
    s.algo = next((a for a in algos.values() if _needs_aux(a)), algos["baseline"])
    m = StepMetrics(None, s.device)
    rollout = rollout_stage(s, 0, m)
    lp = logprob_stage(s, rollout, m)
    g = {role: arm_gradient(s, algo, rollout, lp) for role, algo in algos.items()}
    gb, gt = g["baseline"].double(), g["treatment"].double()
    nb, nt = float(gb.norm()), float(gt.norm())
    return {
        "staleness": 0,
        "responses": len(rollout.response_ids),
        "valid_tokens": int(lp.batch.response_mask.sum()),
        "baseline": {"algo": algos["baseline"].short_name, "grad_norm": nb},
        "treatment": {"algo": algos["treatment"].short_name, "grad_norm": nt},
        "cosine": flat_cosine(gb, gt),
        "relative_difference": float((gt - gb).norm()) / nb if nb > 0 else None,
        "finite": bool(torch.isfinite(gb).all() and torch.isfinite(gt).all()),
    }


def _needs_aux(algo) -> bool:
    from trainer.algorithms import get_estimator

    return bool(get_estimator(algo.estimator).aux_tokens)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.gradient_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the check's JSON")
    parser.add_argument("--baseline", required=True, help="the baseline arm's overrides, space-separated")
    parser.add_argument("--treatment", required=True, help="the treatment arm's overrides, space-separated")
    parser.add_argument("overrides", nargs="*", help="overrides both arms share (workload, seed)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cfgs = [compose([*args.overrides, *shlex.split(arm)]) for arm in (args.baseline, args.treatment)]
    record = gradient_check(*cfgs)
    atomic_write_json(args.out, record)
    print(f"gradient check: cosine {record['cosine']:.4f}, |g| baseline {record['baseline']['grad_norm']:.4g}, "
          f"treatment {record['treatment']['grad_norm']:.4g}")
    return 0


if __name__ == "__main__":
    exit_now(main())  # a normal exit, less the interpreter's teardown (facts/process_exit.py)
