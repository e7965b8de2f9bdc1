"""The OpenAPI schema says what the API does, and a bounded schema-driven fuzz run finds no 5xx and no
response that contradicts it."""

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


@pytest.fixture(scope="module")
def schema_doc(django_db_blocker):
    from drf_spectacular.generators import SchemaGenerator

    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def _ok(doc, path, method="get"):
    return doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]


def test_the_schema_matches_what_the_endpoints_return(schema_doc):
    doc, schemas = schema_doc, schema_doc["components"]["schemas"]
    assert _ok(doc, "/api/v1/allowances/")["type"] == "array"
    ledger = schemas[_ok(doc, "/api/v1/ledger/")["$ref"].rsplit("/", 1)[1]]
    assert {"count", "next", "previous", "results"} <= set(ledger["properties"])  # a page, not one entry
    report = schemas[_ok(doc, "/api/v1/reports/usage/")["$ref"].rsplit("/", 1)[1]]
    assert set(report["properties"]) == {"group_by", "period", "rows"}
    assert schemas["Job"]["properties"]["cluster"].get("nullable") is True
    assert schemas["JobSubmitRequest"]["properties"]["command"]["minItems"] == 1
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                assert {"400", "401", "403", "404", "429"} <= set(op["responses"]), (method, path)


def test_every_request_body_refuses_unknown_fields_as_the_api_does(schema_doc):
    schemas, bodies = schema_doc["components"]["schemas"], []
    for path, item in schema_doc["paths"].items():
        for method, op in item.items():
            for media in op.get("requestBody", {}).get("content", {}).values():
                name = media["schema"]["$ref"].rsplit("/", 1)[1]
                bodies.append((method, path, name, schemas[name].get("additionalProperties")))
    assert len(bodies) > 30
    assert [b for b in bodies if b[3] is not False] == []
    # each documents the serializer the view validates with, not the one it answers with
    documented = {(m, p): n for m, p, n, _ in bodies}
    assert documented["post", "/api/v1/prices/"] == "PriceInputRequest"
    assert documented["put", "/api/v1/prices/{id}/"] == "PatchedPriceInputRequest"  # flavor, tier: the price's
    assert documented["post", "/api/v1/wallets/"] == "WalletCreateRequest"
    assert documented["patch", "/api/v1/quotas/{id}/"] == "PatchedQuotaUpdateRequest"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "body"), [
    ("post", "/api/v1/jobs/{job}/cancel", {"comment": "x", "reason": "typo of comment"}),
    ("put", "/api/v1/policy", {"policy": {}, "coment": "typo"}),
])
def test_the_two_lenient_bodies_refuse_unknown_fields_now(lab, submit, client_for, method, path, body):
    job = submit(lab.alice)
    r = getattr(client_for(lab.root), method)(path.format(job=job.pk), body, format="json")
    assert r.status_code == 400, r.content
    [unknown] = [k for k in body if k not in ("comment", "policy")]
    assert r.json()["error"]["fields"][unknown][0]["code"] == "unknown_field"


def _json_schema(node):
    """OpenAPI 3.0 ``nullable`` as JSON Schema (what jsonschema validates)."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@pytest.mark.django_db
def test_the_cluster_list_documents_each_roles_shape(schema_doc, lab, client_for):
    import jsonschema

    components = _json_schema(schema_doc["components"])
    listed = _ok(schema_doc, "/api/v1/clusters/")
    assert listed["type"] == "array"
    assert components["schemas"][listed["items"]["$ref"].rsplit("/", 1)[1]] == {"oneOf": [
        {"$ref": "#/components/schemas/Cluster"}, {"$ref": "#/components/schemas/ClusterPublic"}]}

    def check(body, ref):
        jsonschema.validate(body, {"components": components, "$ref": ref})

    admins = client_for(lab.root).get("/api/v1/clusters/").json()
    members = client_for(lab.alice).get("/api/v1/clusters/").json()
    assert admins and members and "backend" in admins[0] and "backend" not in members[0]
    for body in (admins, members):  # each is what the list documents
        jsonschema.validate(body, {"components": components, **listed})
    check(admins[0], "#/components/schemas/Cluster")
    check(members[0], "#/components/schemas/ClusterPublic")
    with pytest.raises(jsonschema.ValidationError):  # what the schema said before: every member sees every setting
        check(members[0], "#/components/schemas/Cluster")
    with pytest.raises(jsonschema.ValidationError):  # and an admin's cluster is not a member's (oneOf is exact)
        check(admins[0], "#/components/schemas/ClusterPublic")


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES_PER_OPERATION = 25  # operations that take a body or a query
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


def test_the_schema_generates_without_a_warning(tmp_path):
    """CI's ``check --deploy --fail-level WARNING`` fails on any schema warning (two components of one name, a
    response it cannot describe); this finds them in the suite, where the failing view is named."""
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))
