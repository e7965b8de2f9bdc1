"""Fixtures for budget tests: wallets and prices on top of the shared ``lab``."""

from __future__ import annotations

import pytest


@pytest.fixture
def money(lab):
    """Prices for a100 (realtime 3000, elastic 1000, backfill 500 mcr/GPU-h) and wallets: vision 100 credits,
    nlp 10 credits."""
    from quotas.models import Price
    from quotas.services import wallets

    for tier, p in (("realtime", 3000), ("elastic", 1000), ("backfill", 500)):
        Price.objects.create(flavor=lab.a100, tier=tier, per_gpu_hour=p)
    lab.vwallet = wallets.wallet_create(department=lab.vision, actor=lab.root, balance=100_000)
    lab.nwallet = wallets.wallet_create(department=lab.nlp, actor=lab.root, balance=10_000)
    return lab


@pytest.fixture
def consistent():
    """consistent() asserts balance == sum(entries) and held == sum(held changes) for every wallet."""
    from quotas.services.periodic import ledger_drift

    def check():
        assert ledger_drift() == []

    return check


@pytest.fixture(autouse=True)
def real_speed(settings):
    """The simulated cluster at the speed of a real one: these tests state use in wall-clock minutes, and an
    attempt is charged its own time (the wall's times its cluster's speed-up). A faster cluster's charges:
    tests/scheduling/test_job_clock.py."""
    settings.SIM_SPEEDUP = 1
