"""Independent float64 references for seed 001, written from the formulas with plain Python loops.

They never call production code: each takes nested lists / floats and returns nested lists, so
an error in the vectorised torch implementation cannot be mirrored here.
"""

from __future__ import annotations

import math


def valid_positions(mask_row):
    return [t for t, m in enumerate(mask_row) if m]


def normalize(values, mask, var_floor=1e-8):
    """A_hat = m (A - mu) / sqrt(max(var, floor)); population (ddof=0) over all valid tokens."""
    population = [float(v) for row, mrow in zip(values, mask) for v, m in zip(row, mrow) if m]
    n = len(population)
    if n == 0:
        raise ValueError("empty population")
    mu = math.fsum(population) / n
    var = math.fsum((a - mu) ** 2 for a in population) / n
    scale = 1.0 / math.sqrt(max(var, var_floor))
    out = [[(float(v) - mu) * scale if m else 0.0 for v, m in zip(row, mrow)] for row, mrow in zip(values, mask)]
    return out, mu, var, n


def shaped_returns(reward, logp_old, logp_ref, mask, beta, gamma=1.0):
    """r[i,t] = m(-beta d + 1(t=T_i) R_i);  G[i,t] = m sum_{u=t..T_i} gamma^(u-t) r[i,u]."""
    rewards, returns = [], []
    for R, lo, lr, mrow in zip(reward, logp_old, logp_ref, mask):
        valid = valid_positions(mrow)
        last = valid[-1] if valid else None
        r = []
        for t, m in enumerate(mrow):
            if not m:
                r.append(0.0)
                continue
            val = -beta * (float(lo[t]) - float(lr[t]))
            if t == last:
                val += float(R)
            r.append(val)
        g = []
        for t, m in enumerate(mrow):
            if not m:
                g.append(0.0)
                continue
            g.append(math.fsum(gamma ** (u - t) * r[u] for u in range(t, last + 1)))
        rewards.append(r)
        returns.append(g)
    return rewards, returns


def baseline_advantages(reward, mask, k):
    out = []
    for i, mrow in enumerate(mask):
        g = i // k
        group = [float(x) for x in reward[g * k:(g + 1) * k]]
        c = float(reward[i]) - math.fsum(group) / k
        out.append([c if m else 0.0 for m in mrow])
    return out


def grpo_advantages(reward, mask, k, std_normalize=True, eps=1e-6):
    out = []
    for i, mrow in enumerate(mask):
        g = i // k
        group = [float(x) for x in reward[g * k:(g + 1) * k]]
        mean = math.fsum(group) / k
        c = float(reward[i]) - mean
        if std_normalize:
            sample_sd = math.sqrt(math.fsum((x - mean) ** 2 for x in group) / (k - 1))
            c = c / (sample_sd + eps)
        out.append([c if m else 0.0 for m in mrow])
    return out


def _ppo_branches(lp, lo, a, clip_low, clip_high):
    """One token's ``(rho, -rho A, -clip(rho) A)``."""
    rho = math.exp(float(lp) - float(lo))
    a = float(a)
    return rho, -rho * a, -min(max(rho, 1 - clip_low), 1 + clip_high) * a


def ppo_token_loss(logp, logp_old, adv, mask, clip_low=0.2, clip_high=0.2):
    out, clipped_count, n = [], 0, 0
    for lp, lo, a_row, mrow in zip(logp, logp_old, adv, mask):
        row = []
        for t, m in enumerate(mrow):
            if not m:
                row.append(0.0)
                continue
            _, unclipped, clipped = _ppo_branches(lp[t], lo[t], a_row[t], clip_low, clip_high)
            row.append(max(unclipped, clipped))
            clipped_count += clipped > unclipped
            n += 1
        out.append(row)
    return out, (clipped_count / n if n else 0.0)


def ppo_token_loss_grad(logp, logp_old, adv, mask, clip_low=0.2, clip_high=0.2):
    """d loss[i,t] / d logp[i,t] of ``ppo_token_loss``: -rho A where the unclipped branch is the max
    of the two negated surrogates (ties included: both then have that slope), 0 where the clipped
    branch is strictly larger (its value does not depend on rho) and 0 outside the mask."""
    grad = []
    for lp, lo, a_row, mrow in zip(logp, logp_old, adv, mask):
        row = []
        for t, m in enumerate(mrow):
            if not m:
                row.append(0.0)
                continue
            _, unclipped, clipped = _ppo_branches(lp[t], lo[t], a_row[t], clip_low, clip_high)
            row.append(unclipped if unclipped >= clipped else 0.0)
        grad.append(row)
    return grad


def k2(logp, logp_ref, mask):
    return [[0.5 * (float(a) - float(b)) ** 2 if m else 0.0 for a, b, m in zip(r1, r2, mr)]
            for r1, r2, mr in zip(logp, logp_ref, mask)]


def reduce(values, mask, mode):
    if mode == "sum":
        return math.fsum(float(v) for row, mr in zip(values, mask) for v, m in zip(row, mr) if m)
    if mode == "token_mean":
        vals = [float(v) for row, mr in zip(values, mask) for v, m in zip(row, mr) if m]
        return math.fsum(vals) / len(vals) if vals else 0.0
    if mode == "response_mean":
        per = []
        for row, mr in zip(values, mask):
            vals = [float(v) for v, m in zip(row, mr) if m]
            per.append(math.fsum(vals) / len(vals) if vals else 0.0)
        return math.fsum(per) / len(per) if per else 0.0
    raise ValueError(mode)


# --------------------------------------------------------------------------- issue 9's losses


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def gspo_token_loss(logp, logp_old, adv, mask, clip_low=0.2, clip_high=0.2):
    """rho_i = exp(mean over valid t of (logp - logp_old)); loss = max(-rho A, -clip(rho) A) per valid token.

    Returns (loss, clip_frac, grad) with grad = d(sum of loss)/d logp (a clipped token passes no gradient;
    an unclipped one passes -A_u * rho_i / L_i to every valid token t of its response)."""
    loss, grad, clipped_count, n = [], [], 0, 0
    for lp, lo, a_row, mrow in zip(logp, logp_old, adv, mask):
        valid = valid_positions(mrow)
        length = len(valid)
        rho = math.exp(math.fsum(float(lp[t]) - float(lo[t]) for t in valid) / length) if length else 1.0
        row, through = [], 0.0
        for t, m in enumerate(mrow):
            if not m:
                row.append(0.0)
                continue
            a = float(a_row[t])
            unclipped, clipped = -rho * a, -min(max(rho, 1 - clip_low), 1 + clip_high) * a
            row.append(max(unclipped, clipped))
            clipped_count += clipped > unclipped
            n += 1
            if unclipped >= clipped:
                through += -a * rho / length
        loss.append(row)
        grad.append([through if m else 0.0 for m in mrow])
    return loss, (clipped_count / n if n else 0.0), grad


def sapo_token_loss(logp, logp_old, adv, mask, tau_pos=1.0, tau_neg=1.05):
    """loss = -4 sigmoid(tau (rho - 1)) / tau * A; grad = -4 s (1 - s) rho A (s the sigmoid)."""
    loss, grad = [], []
    for lp, lo, a_row, mrow in zip(logp, logp_old, adv, mask):
        lrow, grow = [], []
        for t, m in enumerate(mrow):
            if not m:
                lrow.append(0.0)
                grow.append(0.0)
                continue
            rho, a = math.exp(float(lp[t]) - float(lo[t])), float(a_row[t])
            tau = tau_pos if a > 0 else tau_neg
            s = _sigmoid(tau * (rho - 1.0))
            lrow.append(-4.0 * s / tau * a)
            grow.append(-4.0 * s * (1.0 - s) * rho * a)
        loss.append(lrow)
        grad.append(grow)
    return loss, grad


def is_pg_token_loss(logp, logp_sampler, adv, mask, cap=None):
    """loss = -min(rho, cap) A with rho = exp(logp - logp_sampler); grad = -rho A below the cap, 0 above."""
    loss, grad = [], []
    for lp, ls, a_row, mrow in zip(logp, logp_sampler, adv, mask):
        lrow, grow = [], []
        for t, m in enumerate(mrow):
            if not m:
                lrow.append(0.0)
                grow.append(0.0)
                continue
            rho, a = math.exp(float(lp[t]) - float(ls[t])), float(a_row[t])
            capped = rho if cap is None else min(rho, cap)
            lrow.append(-capped * a)
            grow.append(-rho * a if cap is None or rho < cap else 0.0)
        loss.append(lrow)
        grad.append(grow)
    return loss, grad


def score_centering_token_loss(logp_target, adv, mask, logp_sampler=None, kl_coeff=0.0):
    """Forward value -A logp_target + kl (logp_sampler - logp_target) (the centred term is 0 in value);
    gradients: d/d logp_target = -A - kl, d/d logp_aux[k] = A / K (returned as the per-token A)."""
    loss, grad_target = [], []
    for i, (lt, a_row, mrow) in enumerate(zip(logp_target, adv, mask)):
        lrow, grow = [], []
        for t, m in enumerate(mrow):
            if not m:
                lrow.append(0.0)
                grow.append(0.0)
                continue
            a = float(a_row[t])
            value = -a * float(lt[t])
            if kl_coeff:
                value += kl_coeff * (float(logp_sampler[i][t]) - float(lt[t]))
            lrow.append(value)
            grow.append(-a - kl_coeff)
        loss.append(lrow)
        grad_target.append(grow)
    return loss, grad_target


def overlong_penalty(length, max_len, cache, factor=1.0):
    """DAPO: 0 up to L - c, then linear to -factor at L, -factor beyond L."""
    if cache <= 0 or length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return factor * ((max_len - cache) - length) / cache
    return -factor
