"""Chapter 4's sentence on the capture's cost (`lib.studies.delta.overhead.capture_cost_words`)."""
from lib.studies.delta.overhead import capture_cost_words

DATA = dict(every=50, overhead_at_every={"capture": 0.071}, event_ms={"capture": 76.4}, capture_copy_ms=78.0)


def test_a_positive_cost_is_read_against_the_target():
    words = capture_cost_words(DATA, 0.10)
    assert "adds 7.1%" in words and "it meets the target of at most 10%" in words and "costs 76 ms" in words
    assert "misses" in capture_cost_words(DATA | dict(overhead_at_every={"capture": 0.16}), 0.10)


def test_a_negative_cost_is_said_to_be_below_the_resolution_with_the_direct_timing():
    neg = DATA | dict(overhead_at_every={"capture": -0.029}, event_ms={"capture": -30.2})
    words = capture_cost_words(neg, 0.10)
    assert "below zero (-2.9%, -30 ms an event)" in words and "does not resolve it" in words
    assert "its copy takes 78 ms, 1.6 ms a step" in words and "costs -" not in words
    assert "copy" not in capture_cost_words({k: v for k, v in neg.items() if k != "capture_copy_ms"}, 0.10)
