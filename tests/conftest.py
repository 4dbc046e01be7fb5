"""Shared test settings.

Hypothesis profiles (pick one with ``HYPOTHESIS_PROFILE``):

- ``ci`` (the default): bounded, so the whole suite fits CI's budget on 2 cores. The
  state machines run 60 examples of up to 25 steps each.
- ``stress``: 2,000 examples of 50 steps for the state machines (opt-in).
- ``nightly``: like stress with 80 steps and no example cap to speak of; run it with
  ``TRIO_RECALL_NIGHTLY_SECONDS`` set, which makes ``test_nightly_until_budget`` run
  fresh rounds of the machines until that many seconds have passed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=60, stateful_step_count=25, **_COMMON)
settings.register_profile("stress", max_examples=2000, stateful_step_count=50, **_COMMON)
settings.register_profile("nightly", max_examples=100_000, stateful_step_count=80, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
