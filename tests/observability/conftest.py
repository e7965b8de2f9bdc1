"""Fixtures: a stand-in dcgm-exporter and a real Prometheus scraping it (see prom_world)."""

from __future__ import annotations

import pytest
from prom_world import PROMETHEUS, Exporter, Prometheus, need


@pytest.fixture(scope="module")
def exporter():
    e = Exporter()
    yield e
    e.close()


@pytest.fixture(scope="module")
def prometheus(exporter):
    p = Prometheus(need(PROMETHEUS, "prometheus"), exporter.port)
    yield p
    p.stop()
