"""Label values taken from requests stay bounded."""

from llmrl.common.label_values import BoundedLabelValues


def test_new_values_past_the_limit_are_counted_as_other():
    bounded = BoundedLabelValues(limit=3)
    assert [bounded(v) for v in ("env", "seed", "env", "keys")] == ["env", "seed", "env", "keys"]
    assert {bounded(f"made-up-{i}") for i in range(500)} == {"other"}
    assert bounded("seed") == "seed"  # values seen before keep their own series
