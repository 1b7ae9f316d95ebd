"""Reference formulas for the GRPO-family objectives, written from the papers' equations in float64 numpy.

They share no code with TRL: each loss comes with its gradient with respect to the per-token log-probs, derived
by hand, so a test can compare both the value and the gradient a trainer produces.

Notation: `logps`, `old_logps`, `ref_logps` and `mask` are (rows, tokens); `advantages` is (rows,). Losses are
the negated objectives (what an optimiser minimises).
"""

import numpy as np


def clipped_surrogate(logps, old_logps, advantages, epsilon_low, epsilon_high):
    """Per-token min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) and its derivative with respect to log pi_theta.

    The derivative of r with respect to log pi_theta is r. The unclipped branch carries it; the clipped branch is
    constant outside the clip range, so a token's gradient vanishes exactly when min() selects a clipped value.
    """
    ratio = np.exp(logps - old_logps)
    adv = np.asarray(advantages, dtype=np.float64)[:, None]
    clipped_ratio = np.clip(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    surrogate = np.minimum(ratio * adv, clipped_ratio * adv)
    inside_range = (ratio >= 1.0 - epsilon_low) & (ratio <= 1.0 + epsilon_high)
    # Outside the range min() still picks the unclipped (more pessimistic) value in these two cases.
    pessimistic_below = (adv > 0) & (ratio < 1.0 - epsilon_low)
    pessimistic_above = (adv < 0) & (ratio > 1.0 + epsilon_high)
    carries_gradient = inside_range | pessimistic_below | pessimistic_above
    d_surrogate = np.where(carries_gradient, ratio * adv, 0.0)
    return surrogate, d_surrogate


def k3_kl(logps, ref_logps):
    """Schulman's K3 estimator of KL(pi_theta || pi_ref) per token: x - log x - 1 with x = pi_ref / pi_theta.

    Non-negative because log x <= x - 1. Derivative with respect to log pi_theta: 1 - x.
    """
    x = np.exp(ref_logps - logps)
    return x - np.log(x) - 1.0, 1.0 - x


def importance_weighted_k3_kl(logps, old_logps, ref_logps):
    """r * K3 with r = pi_theta / pi_old, the DeepSeek-V3.2 correction that makes the K3 gradient the unbiased
    reverse-KL gradient off-policy. Product rule: d(r K3) = r K3 + r (1 - x)."""
    ratio = np.exp(logps - old_logps)
    kl, d_kl = k3_kl(logps, ref_logps)
    return ratio * kl, ratio * kl + ratio * d_kl


def per_token_loss(logps, old_logps, advantages, epsilon_low, epsilon_high, beta=0.0, ref_logps=None,
                   kl_importance_weighted=False):
    """-surrogate + beta * KL per token, with its derivative with respect to log pi_theta. The KL is the paper's
    K3, or r * K3 when `kl_importance_weighted`."""
    surrogate, d_surrogate = clipped_surrogate(logps, old_logps, advantages, epsilon_low, epsilon_high)
    loss, d_loss = -surrogate, -d_surrogate
    if beta:
        if kl_importance_weighted:
            kl, d_kl = importance_weighted_k3_kl(logps, old_logps, ref_logps)
        else:
            kl, d_kl = k3_kl(logps, ref_logps)
        loss, d_loss = loss + beta * kl, d_loss + beta * d_kl
    return loss, d_loss


def _aggregate(token_loss, d_token_loss, weights):
    return float((token_loss * weights).sum()), d_token_loss * weights


def grpo_loss(logps, old_logps, advantages, mask, epsilon, **kl):
    """GRPO: the mean over sequences of each sequence's token mean, symmetric clip range epsilon. `kl`: the
    `beta`, `ref_logps` and `kl_importance_weighted` arguments of `per_token_loss`."""
    token_loss, d_token_loss = per_token_loss(logps, old_logps, advantages, epsilon, epsilon, **kl)
    lengths = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    weights = mask / lengths / mask.shape[0]
    return _aggregate(token_loss, d_token_loss, weights)


def dapo_loss(logps, old_logps, advantages, mask, epsilon_low, epsilon_high, total_tokens=None, **kl):
    """DAPO: every token of the generation batch weighs the same, 1 / (number of completion tokens in it).

    `total_tokens` is that count for the whole generation batch; pass it when `logps` is one micro-batch of it.
    """
    token_loss, d_token_loss = per_token_loss(logps, old_logps, advantages, epsilon_low, epsilon_high, **kl)
    total = mask.sum() if total_tokens is None else total_tokens
    weights = mask / max(float(total), 1.0)
    return _aggregate(token_loss, d_token_loss, weights)


def dr_grpo_loss(logps, old_logps, advantages, mask, epsilon, max_completion_length, **kl):
    """Dr.GRPO: token sums with a constant normaliser, never a completion's own length. TRL's constant is
    rows * max_completion_length."""
    token_loss, d_token_loss = per_token_loss(logps, old_logps, advantages, epsilon, epsilon, **kl)
    weights = mask / (mask.shape[0] * max_completion_length)
    return _aggregate(token_loss, d_token_loss, weights)


def group_advantages(rewards, group_size, scale_by_std, eps=1e-4):
    """r - group mean, optionally divided by (the group's sample standard deviation + eps)."""
    grouped = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    if scale_by_std:
        centred = centred / (grouped.std(axis=1, ddof=1, keepdims=True) + eps)
    return centred.reshape(-1)


def soft_overlong_punishment(length, max_length, buffer_length, penalty_factor=1.0):
    """DAPO's equation 13, scaled by `penalty_factor`."""
    threshold = max_length - buffer_length
    if length <= threshold:
        return 0.0
    if length <= max_length:
        return penalty_factor * (threshold - length) / buffer_length
    return -penalty_factor
