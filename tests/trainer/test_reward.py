"""The rule-based math reward and GSM8K label normalisation."""

from __future__ import annotations

import pytest

from facts.reward import extract_last_number, math_reward, normalize_label


@pytest.mark.parametrize(("text", "value"), [
    ("The answer is 1,234 apples.", 1234.0),
    ("She owes -5 dollars", -5.0),
    ("3 + 4 = 7\n#### 7", 7.0),
    ("pi is about 3.14", 3.14),
    ("first 12 then 1,000,000", 1_000_000.0),
    ("no number here", None),
    ("Nancy has NaN and inf apples", None),  # words are not numbers
    ("Nancy has 5 apples; nan", 5.0),
    ("", None),
])
def test_extract_last_number(text, value):
    assert extract_last_number(text) == value


@pytest.mark.parametrize(("response", "label", "reward"), [
    (" 3 + 5 = 8. #### 8", "8", 1.0),
    (" it is 1,234", "1234", 1.0),
    (" it is 1234", "1,234", 1.0),
    (" the loss is -3", "-3", 1.0),
    (" the result is -3 not 3", "-3", 0.0),  # the LAST number counts
    (" I do not know", "8", 0.0),
    (" Nancy ate them all", "0", 0.0),
    (" Nancy has 8", "Tom has 3 + 5 = 8 apples\n#### 8", 1.0),  # rationale-form label is normalised
    (" 8.0", "8", 1.0),
    (" 8.", "8", 1.0),  # sentence-final period
])
def test_math_reward(response, label, reward):
    assert math_reward(response, label) == reward


def test_label_normalisation_uses_the_last_marker():
    assert normalize_label("a #### b\n#### 42 ") == "42"
    assert normalize_label(" 17 ") == "17"


def test_rationale_label_without_normalisation_would_score_zero():
    # Seed 000's incident: comparing with the raw rationale gives all-zero reward. The raw string
    # is not a number, so the reward must come from the normalised scalar instead.
    label = "She has 2 + 2 = 4\n#### 4"
    assert normalize_label(label) == "4"
    assert math_reward("so 4", label) == 1.0
