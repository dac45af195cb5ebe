"""JSON column values: refused before saving when no reader could serialise them, and stored
values (from before the check) rendered safely."""
from __future__ import annotations

import orjson
import pytest

from registry.json_values import MAX_DEPTH, check_storable, readable


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [
    {"max_model_len": 4096, "dtype": "bfloat16", "rope": {"factor": 2.0}, "flags": [True, None]},
    {"big": 2**63 - 1, "small": -(2**63)},
    nested(MAX_DEPTH),
])
def test_storable_values_pass_unchanged(value):
    assert check_storable(value) is value
    orjson.dumps(value)


@pytest.mark.parametrize("value, words", [
    ({"n": 2**63}, "engine_args.n: integer 9223372036854775808 is outside the 64-bit range"),
    ({"a": [1, {"b": -(2**63) - 1}]}, "engine_args.a[1].b"),
    ({"x": float("nan")}, "not a finite number"),
    ({"x": float("inf")}, "not a finite number"),
    ({"deep": nested(MAX_DEPTH + 1)}, "nests deeper"),
    ({"s": "x" * 100_001}, "longer than"),
    ({"k": {1, 2}}, "set is not a JSON value"),
])
def test_unstorable_values_are_refused_naming_the_place(value, words):
    with pytest.raises(ValueError, match=r".*" + words.replace("[", r"\[").replace("]", r"\]")):
        check_storable(value, "engine_args")


def test_readable_makes_any_stored_value_serialisable():
    stored = {"n": 10**30, "neg": -(10**25), "ok": 7, "f": float("nan"), "l": [2**70, 1.5],
              "deep": nested(300)}
    with pytest.raises(TypeError):
        orjson.dumps(stored)
    safe = readable(stored)
    assert safe["n"] == str(10**30) and safe["neg"] == str(-(10**25)) and safe["ok"] == 7
    assert safe["f"] is None and safe["l"] == [str(2**70), 1.5]
    orjson.dumps(safe)
