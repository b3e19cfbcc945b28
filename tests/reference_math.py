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


def ppo_token_loss(logp, logp_old, adv, mask, clip_low=0.2, clip_high=0.2):
    out, clipped_count, n = [], 0, 0
    for lp, lo, a_row, mrow in zip(logp, logp_old, adv, mask):
        row = []
        for t, m in enumerate(mrow):
            if not m:
                row.append(0.0)
                continue
            rho = math.exp(float(lp[t]) - float(lo[t]))
            a = float(a_row[t])
            unclipped = -rho * a
            clipped = -min(max(rho, 1 - clip_low), 1 + clip_high) * a
            row.append(max(unclipped, clipped))
            clipped_count += clipped > unclipped
            n += 1
        out.append(row)
    return out, (clipped_count / n if n else 0.0)


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
