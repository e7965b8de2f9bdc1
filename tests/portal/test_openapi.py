"""The OpenAPI schema says what the API does (the schema-driven fuzz run against it is
``test_openapi_fuzz.py``)."""

from __future__ import annotations

import pytest


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


def test_the_schema_generates_without_a_warning(tmp_path):
    """CI's ``check --deploy --fail-level WARNING`` fails on any schema warning (two components of one name, a
    response it cannot describe); this finds them in the suite, where the failing view is named."""
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))
