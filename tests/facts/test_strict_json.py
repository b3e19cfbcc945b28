"""facts.files.loads_strict and evidence.fileio.parse_json: JSON the records may hold, and what they refuse."""

from __future__ import annotations

import json

import pytest

from evidence.fileio import JSONError, parse_json
from facts.files import loads_strict


@pytest.mark.parametrize("text", ["NaN", "-Infinity", '{"x": Infinity}', "1e999", '{"loss": -1.5e400}', "[1e309]"])
def test_non_finite_numbers_of_every_spelling_are_refused(text):
    # Python's own reader gives inf for 1e999: a record with it could not be written back (allow_nan=False)
    with pytest.raises(ValueError):
        loads_strict(text)
    with pytest.raises(JSONError, match=r"^not valid JSON \("):
        parse_json(text.encode())


def test_finite_numbers_read_as_pythons_reader_reads_them():
    text = '{"a": 1e308, "b": -2.5e-320, "c": 12345678901234567890123, "d": 0.1}'
    assert loads_strict(text) == json.loads(text)


def test_nesting_past_the_readers_depth_is_an_unreadable_record_not_a_crash():
    with pytest.raises(JSONError, match="nested too deeply"):
        parse_json(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize("text", ['{"verdict": "VALIDATED", "rule": "t", "verdict": "INCONCLUSIVE", "rule": "t"}',
                                  '{"a": {"b": 1, "b": 1}}', '[{"x": 0}, {"x": 1, "y": 2, "x": 1}]'])
def test_an_object_that_names_a_key_twice_is_refused_at_any_depth(text):
    # Python's own reader keeps the last value; a reader of the text (or a first-key-wins parser) sees the first
    with pytest.raises(ValueError, match="duplicate key"):
        loads_strict(text)
    with pytest.raises(JSONError, match=r"^not valid JSON \(duplicate (keys 'verdict', 'rule'|key 'b'|key 'x')\)$"):
        parse_json(text.encode())


def test_the_same_key_in_different_objects_is_no_duplicate():
    text = '{"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}]}'
    assert loads_strict(text) == json.loads(text)
