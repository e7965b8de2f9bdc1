"""Shared fixtures: a small lab (two departments, an 8-GPU simulated cluster), users of every role, clients.

Databases: PostgreSQL when DATABASE_URL is set (CI always sets it), else SQLite. Tests marked ``postgres`` or
``redis`` skip on a laptop without those servers, but FAIL in CI (CI=true), so CI can never pass by skipping.
"""

from __future__ import annotations

import contextlib
import os

from tests.workers import prepare_environment

prepare_environment()  # done already by tests/settings.py, except in the pure suites run without Django

import pytest  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config):
    if IN_CI and not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        raise pytest.UsageError("CI=true but DATABASE_URL is not a PostgreSQL URL: CI must test on PostgreSQL.")


def _redis_url() -> str:
    return os.environ.get("REDIS_URL") or os.environ.get("CELERY_BROKER_URL", "").replace("filesystem://", "") or ""


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    redis_ok = False
    url = _redis_url() or "redis://127.0.0.1:6379/0"
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
        redis_ok = True
    except Exception:  # noqa: BLE001
        redis_ok = False
    for item in items:
        if "ci_only" in item.keywords and not IN_CI:
            why = item.get_closest_marker("ci_only").kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"runs in CI only (CI=true): {why}".rstrip(": ")))
        if "postgres" in item.keywords and not settings.IS_POSTGRES:
            if IN_CI:
                raise pytest.UsageError(f"{item.nodeid} needs PostgreSQL and CI has none")
            item.add_marker(pytest.mark.skip(
                reason="needs PostgreSQL: set DATABASE_URL=postgres://... (SQLite runs the rest)"))
        if "redis" in item.keywords and not redis_ok:
            if IN_CI:
                raise pytest.UsageError(f"{item.nodeid} needs Redis at {url} and it is unreachable")
            item.add_marker(pytest.mark.skip(reason=f"needs Redis at {url}"))


@pytest.fixture(autouse=True)
def _eager_celery(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast fixtures
    settings.SIM_SESSION_STANDIN = False  # no stand-in processes for simulated sessions unless a test asks
    from portal.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    from scheduling.backends import reset_backends

    reset_backends()
    yield
    reset_backends()


@pytest.fixture(autouse=True)
def _fresh_cache(request):
    """Every test starts with an empty cache: the per-user submit throttle counts in it, and counted across
    the whole suite it would refuse a later test's submissions (429) by how many tests ran in the same minute.
    An unreachable cache is what the outage tests exercise; they set it up themselves."""
    if not request.config.pluginmanager.has_plugin("django"):
        return
    from django.core.cache import cache

    with contextlib.suppress(Exception):
        cache.clear()


@pytest.fixture(autouse=True)
def sim_clock(request, _eager_celery):
    """The simulated cluster's clock, for every test: it stands still until the test advances it
    (``sim_clock.advance(seconds)``), so no simulated pod starts, logs or ends by how fast the machine is. The
    pure suites run without Django (``-p no:django``) and have no simulated cluster."""
    if not request.config.pluginmanager.has_plugin("django"):
        return None
    from scheduling.backends import reset_backends
    from scheduling.backends.clock import ManualClock

    clock = ManualClock()
    request.getfixturevalue("settings").SIM_CLOCK = clock
    reset_backends()
    return clock


class Lab:
    """Handles to the fixture world, for readable tests."""


@pytest.fixture
def lab(db):
    from django.contrib.auth import get_user_model

    from portal.models import Department, Membership, Role
    from quotas.models import Flavor, Quota
    from scheduling.models import Cluster, Node

    User = get_user_model()
    w = Lab()
    w.vision = Department.objects.create(slug="vision", name="Vision")
    w.nlp = Department.objects.create(slug="nlp", name="NLP")
    w.platform = Department.objects.create(slug="platform", name="Platform")
    w.a100 = Flavor.objects.create(name="a100-80gb", resource_name="nvidia.com/gpu",
                                   node_labels={"gpu-type": "a100"}, gpu_memory_gib=80)
    w.mig = Flavor.objects.create(name="a100-mig-3g.40gb", resource_name="nvidia.com/mig-3g.40gb",
                                  node_labels={"gpu-type": "a100-mig"})
    w.cluster = Cluster.objects.create(name="default", is_default=True, backend="simulated")
    w.nodes = [Node.objects.create(cluster=w.cluster, name=f"n{i}", flavor=w.a100, gpus=4,
                                   labels={"gpu-type": "a100"}) for i in range(2)]
    Quota.objects.create(department=w.vision, flavor=w.a100, nominal=4, borrowing_limit=4)
    Quota.objects.create(department=w.nlp, flavor=w.a100, nominal=4, borrowing_limit=4)

    def user(name, dept, role=Role.RESEARCHER, tier="standard"):
        u = User.objects.create_user(username=name, password=f"pw-{name}-long-enough", email=f"{name}@x.test")
        if dept is not None:
            Membership.objects.create(user=u, department=dept, role=role, user_tier=tier)
        return u

    w.alice = user("alice", w.vision)  # researcher, vision
    w.amy = user("amy", w.vision)  # another researcher, vision
    w.vadmin = user("vadmin", w.vision, Role.DEPARTMENT_ADMIN, "pi")
    w.bob = user("bob", w.nlp)  # researcher, nlp
    w.nadmin = user("nadmin", w.nlp, Role.DEPARTMENT_ADMIN)
    w.root = user("root", w.platform, Role.PLATFORM_ADMIN)
    w.stranger = user("stranger", None)  # logged in, member of nothing
    return w


def job_payload(**overrides) -> dict:
    body = {
        "name": "train-1",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "flavor": "a100-80gb",
        "gpus": 1,
    }
    body.update(overrides)
    return body


@pytest.fixture
def payload():
    return job_payload


@pytest.fixture
def client_for():
    """client_for(user) -> an APIClient authenticated as ``user`` (or anonymous for None)."""
    from rest_framework.test import APIClient

    def make(user=None):
        c = APIClient()
        if user is not None:
            c.force_authenticate(user)
        return c

    return make


@pytest.fixture
def submit(lab):
    """submit(user, **fields) -> Job, through the real service (validated like the API)."""
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.services.jobs import job_submit

    def make(user, key=None, **fields):
        s = JobSubmitSerializer(data=job_payload(**fields))
        s.is_valid(raise_exception=True)
        job, _ = job_submit(user=user, data=s.validated_data, idempotency_key=key)
        return job

    return make


@pytest.fixture
def go(django_capture_on_commit_callbacks):
    """go(fn, *a) runs fn with on-commit side effects (Celery tasks, eager) executed."""

    def run(fn, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run


@pytest.fixture(autouse=True)
def dns(request, monkeypatch):
    """Webhook URLs resolve through a fake resolver (tests/fakes/dns.py), never a real DNS server. The pure
    suites run without Django (``-p no:django``), where the notifications app cannot even be imported."""
    if not request.config.pluginmanager.has_plugin("django"):
        return None
    from tests.fakes.dns import FakeDNS

    fake = FakeDNS()
    monkeypatch.setattr("notifications.services.egress.resolve", fake)
    return fake
