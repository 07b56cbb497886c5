"""lib/training/regime.py: the health rule of a training regime and the LR it selects (each part can fail)."""
import numpy as np

from lib.training import regime


def _result(specs):
    """specs: (arm, seed, lr, outcome, max-logit curve) -> (data, arrays) of a fake training result."""
    runs, arrays = [], {}
    for arm, seed, lr, oc, curve in specs:
        rid = f"{arm}_s{seed}_lr{lr:g}"
        runs.append(dict(id=rid, arm=arm, seed=seed, lr=lr, outcome=oc, steps=3000, tag=""))
        steps = np.arange(0, 3001, 50)
        arrays[f"{rid}__step"] = steps
        arrays[f"{rid}__max_logit"] = np.stack([curve(steps), curve(steps) - 1.0], axis=1)   # (steps, layers)
    return dict(runs=runs), arrays


flat = lambda s: 30 + 0 * s                       # noqa: E731
growing = lambda s: 30 + 0.02 * s                 # 90 at 3000 steps, 150 at 6000 (extrapolated)  # noqa: E731
high = lambda s: 30 + 0.03 * s                    # 120 at 3000  # noqa: E731


def test_select_lr_takes_the_largest_healthy_lr():
    data, arrays = _result([(a, s, lr, "stable", flat) for a in ("fp32", "sdpa") for s in (0, 1, 2)
                            for lr in (1e-3, 2e-3)])
    lr, why = regime.select_lr(data, arrays)
    assert lr == 2e-3 and "≤ 100" in why


def test_each_condition_can_fail():
    base = [(a, s, 1e-3, "stable", flat) for a in ("fp32", "sdpa") for s in (0, 1, 2)]
    # a degraded reference run, a logit above the bound, a trend that crosses it by the horizon, a missing arm
    for bad in ((("sdpa", 1, 2e-3, "degraded", flat),), (("fp32", 0, 2e-3, "stable", high),),
                (("fp32", 0, 2e-3, "stable", growing),)):
        others = [(a, s, 2e-3, "stable", flat) for a in ("fp32", "sdpa") for s in (0, 1, 2)
                  if (a, s) != bad[0][:2]]
        data, arrays = _result(base + others + list(bad))
        assert regime.select_lr(data, arrays)[0] == 1e-3, bad
    data, arrays = _result(base + [("fp32", s, 2e-3, "stable", flat) for s in (0, 1, 2)])
    assert regime.health(data, arrays)[2e-3]["healthy"] is False       # SDPA never ran at 2e-3
    data, arrays = _result([(a, 0, 1e-3, "exploded", flat) for a in ("fp32", "sdpa")])
    assert regime.select_lr(data, arrays) == (None, "no candidate LR passed the pilot test")


def test_extrapolation_uses_the_last_steps():
    data, arrays = _result([("fp32", 0, 1e-3, "stable", growing)])
    h = regime.run_health(data["runs"][0], arrays, horizon=6000)
    assert abs(h["extrapolated"] - 150.0) < 1e-6 and not h["healthy"] and h["max_logit"] <= 100
    assert regime.run_health(data["runs"][0], arrays)["healthy"]      # without a horizon: judged as run
