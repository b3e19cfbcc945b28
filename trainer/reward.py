"""The reward the trainer scores with: ``facts.reward``'s pure function of (response, label), re-exported so that
the trainer's callers keep their import and the evidence re-scores with the very same function."""

from facts.reward import NUMBER, extract_last_number, math_reward, normalize_label

__all__ = ["NUMBER", "extract_last_number", "math_reward", "normalize_label"]
