"""Fixtures for the Job and CronJob controller tests: a lab simulator (no HTTP) whose batch clock stands at
``T0`` until a test advances it. The test modules import ``batch_kit``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuplan.sim.testing import SimFactory

# pytest's importlib mode does not put test folders on sys.path; the test modules import batch_kit.
sys.path.insert(0, str(Path(__file__).parent))

from batch_kit import T0, Batch  # noqa: E402


@pytest.fixture
def batch(sim_factory: SimFactory) -> Batch:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(30)
    sim.clock.freeze(T0)
    return Batch(sim)
