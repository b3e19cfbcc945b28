"""Rule-based math reward: the last number in the response against the scalar target. A pure function of
(response, label), stated here once: the trainer scores with it (``trainer.reward`` re-exports it) and the
evidence re-scores every evaluated response with it, never trusting a stored reward.

GSM8K labels come as a worked rationale ending ``#### <number>``; seed 000's all-zero-reward
incident came from comparing against that rationale form. Labels are therefore normalised with
``answer.rsplit("####", 1)[1].strip()`` before any comparison.
"""

from __future__ import annotations

import re

# A number: optional minus, digits with optional thousands commas, optional decimals.
# Words such as "Nancy", "nan" or "inf" are not numbers.
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def normalize_label(answer: str) -> str:
    """``answer.rsplit("####", 1)[1].strip()`` for GSM8K rationale labels; scalar labels pass as-is."""
    return answer.rsplit("####", 1)[1].strip() if "####" in answer else answer.strip()


def _to_float(text: str) -> float | None:
    text = text.replace(",", "").rstrip(".")
    try:
        return float(text)
    except ValueError:
        return None


def extract_last_number(text: str) -> float | None:
    """The numeric value of the last number in ``text``, or ``None`` when there is none."""
    matches = NUMBER.findall(text)
    return _to_float(matches[-1]) if matches else None


def math_reward(response: str, label: str) -> float:
    """1.0 when the response's last number equals the (normalised) label's value, else 0.0."""
    target = _to_float(normalize_label(label))
    predicted = extract_last_number(response)
    if target is None or predicted is None:
        return 0.0
    return 1.0 if abs(predicted - target) <= 1e-6 * max(1.0, abs(target)) else 0.0
