"""A bounded schema-driven fuzz run of the whole API finds no 5xx and no response that contradicts the OpenAPI
schema. A file of its own, the suite's longest single test after the cross-tenant walks: ``--dist loadfile``
can then run it beside the schema's other tests (``test_openapi.py``) rather than after them."""

from __future__ import annotations

import logging

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Operations that take a body or a query. The bugs this run has found were values past a bound (an id or an
# amount the database's integer cannot hold), which the generator tries among its first cases: with two of
# those fixes undone, 15 cases found what 25 found, for about a quarter less CPU time over the 159 operations.
EXAMPLES_PER_OPERATION = 15
# An operation whose only input is the identifier in its path (a GET or DELETE of one object, a bare action):
# a few values already hit the seeded objects, miss, and try odd strings; more only repeat that.
EXAMPLES_PATH_ONLY = 8


@pytest.fixture
def _quiet_refusals():
    """No log line per 4xx: most generated cases are refused, and the checks read the statuses themselves."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.django_db
@pytest.mark.usefixtures("_quiet_refusals")
def test_schema_driven_fuzz_finds_no_5xx_and_no_schema_violation(lab, submit):
    """Every operation of the schema, called as a platform admin with generated (valid and invalid) input.
    Seeded objects give the path parameters something real to hit now and then."""
    from portal.models import ApiToken
    from portal.wsgi import application

    submit(lab.alice)
    _, secret = ApiToken.issue(user=lab.root, name="fuzz")
    headers = {"Authorization": f"Bearer {secret}"}
    failures = []
    # As Django's test client does: the WSGI handler must not close the test's connection between requests.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) > 30
        _fuzz(operations, headers, failures)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    assert not failures, "\n\n".join(failures)


def _fuzz(operations, headers, failures):
    for operation in operations:
        raw = operation.definition.raw
        path_only = "requestBody" not in raw and all(p.get("in") == "path" for p in raw.get("parameters", ()))
        examples = EXAMPLES_PATH_ONLY if path_only else EXAMPLES_PER_OPERATION

        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - all operations tried, all reported
            failures.append(f"{operation.label}: {exc}"[:2000])
