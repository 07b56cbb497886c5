"""The capture-cost benchmark read in words (chapter 4): what delta_capture's captures add to a proxy training step.

`capture_cost_words(data, target)` reads `benchmarks.bench_capture_overhead`'s result data: `overhead_at_every`
(fractions of a step with telemetry, at one event per `every` steps), `event_ms` (milliseconds an event, from the
median step times of interleaved rounds) and `capture_copy_ms` (the capture's copy, timed directly).
"""
from __future__ import annotations

__all__ = ["capture_cost_words"]


def capture_cost_words(data: dict, target: float) -> str:
    """The capture's cost at one event per `every` steps against `target` (a fraction of a step), in words.

    The cost is a difference of two medians over interleaved rounds. Where it comes out negative the capture cost
    less than the rounds' own spread resolves: that is said, with the directly timed copy beside it, rather than
    read as a negative cost (a capture does not speed a step up)."""
    share, event, every = data["overhead_at_every"]["capture"], data["event_ms"]["capture"], int(data["every"])
    if share >= 0:
        verdict = "meets" if share <= target else "misses"
        return (f"At one event per {every} steps the capture adds {100 * share:.1f}% to a run that already has its "
                f"telemetry: it {verdict} the target of at most {100 * target:.0f}% that we set for it. One capture "
                f"costs {event:.0f} ms.")
    copy = data.get("capture_copy_ms")
    timed = (f"; timed directly, its copy takes {copy:.0f} ms, {copy / every:.1f} ms a step at that rate"
             if copy is not None else "")
    return (f"At one event per {every} steps the capture's cost came out below zero ({100 * share:.1f}%, "
            f"{event:.0f} ms an event): smaller than what these rounds resolve, so it meets the target of at most "
            f"{100 * target:.0f}% that we set for it, but this benchmark does not resolve it{timed}.")
