"""Department secrets through the API: who may declare and see them, values never shown back, every bad
input a 400 with field errors, and a job's use of them checked at submission."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from portal.models import AuditEntry
from workloads.models import DepartmentSecret

pytestmark = pytest.mark.django_db

WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"


def create(client, **body):
    return client.post("/api/v1/secrets", body, format="json")


@pytest.fixture
def wandb(lab, client_for):
    r = create(client_for(lab.vadmin), name="wandb", kind="value", values={"api_key": WANDB_KEY})
    assert r.status_code == 201, r.json()
    return r.json()


def test_value_secret_is_encrypted_at_rest_and_never_shown(lab, client_for, wandb):
    assert wandb["keys"] == ["api_key"] and wandb["values"] == "set" and wandb["kube_name"] == "portal-secret-wandb"
    assert WANDB_KEY not in json.dumps(wandb)
    with connection.cursor() as cur:
        cur.execute("SELECT values_encrypted FROM workloads_departmentsecret")
        [(stored,)] = cur.fetchall()
    assert WANDB_KEY not in stored and stored.startswith("gAAAAA")
    assert DepartmentSecret.objects.get().values == {"api_key": WANDB_KEY}
    for user in (lab.alice, lab.vadmin, lab.root):
        for url in ("/api/v1/secrets", "/api/v1/secrets/wandb?department=vision"):
            r = client_for(user).get(url)
            assert r.status_code == 200 and WANDB_KEY not in r.content.decode()
    entries = AuditEntry.objects.filter(action="secret.create")
    assert entries.count() == 1 and WANDB_KEY not in json.dumps(entries[0].new)
    assert entries[0].new["keys"] == ["api_key"]


def test_rotation_replaces_values_and_audits_keys_only(lab, client_for, wandb):
    new = "f" * 40
    r = client_for(lab.vadmin).patch("/api/v1/secrets/wandb", {"values": {"api_key": new, "entity": "lab"}},
                                     format="json")
    assert r.status_code == 200 and r.json()["keys"] == ["api_key", "entity"] and r.json()["version"] == 2
    assert DepartmentSecret.objects.get().values == {"api_key": new, "entity": "lab"}
    audit = AuditEntry.objects.get(action="secret.update")
    assert new not in json.dumps([audit.old, audit.new]) and WANDB_KEY not in json.dumps([audit.old, audit.new])


def test_members_see_their_department_only_and_only_admins_change(lab, client_for, wandb):
    assert [s["name"] for s in client_for(lab.alice).get("/api/v1/secrets").json()] == ["wandb"]
    assert client_for(lab.bob).get("/api/v1/secrets").json() == []
    assert client_for(lab.bob).get("/api/v1/secrets/wandb").status_code == 404
    assert client_for(lab.nadmin).delete("/api/v1/secrets/wandb?department=vision").status_code == 400
    assert client_for(lab.alice).patch("/api/v1/secrets/wandb", {"values": {"a": "b"}}, format="json"
                                       ).status_code == 403
    assert create(client_for(lab.alice), name="x", kind="value", values={"a": "b"}).status_code == 403
    assert client_for(lab.stranger).get("/api/v1/secrets").status_code == 403
    assert client_for(lab.alice).delete("/api/v1/secrets/wandb").status_code == 403
    assert client_for(lab.vadmin).delete("/api/v1/secrets/wandb").status_code == 204
    assert not DepartmentSecret.objects.exists()


def test_platform_admin_declares_for_a_named_department(lab, client_for):
    r = create(client_for(lab.root), name="hf", kind="reference", reference_name="hf-token", keys=["token"],
               department="nlp")
    assert r.status_code == 201 and r.json()["department"] == "nlp" and r.json()["values"] is None
    assert create(client_for(lab.vadmin), name="hf", kind="value", values={"t": "v"},
                  department="nlp").json()["error"]["fields"]["department"]


def test_duplicate_name_is_a_conflict(lab, client_for, wandb):
    r = create(client_for(lab.vadmin), name="wandb", kind="value", values={"api_key": "x"})
    assert r.status_code == 409 and "name" in r.json()["error"]["fields"]


BAD = [
    ({"name": "Bad_Name", "kind": "value", "values": {"a": "b"}}, "name"),
    ({"name": "x" * 41, "kind": "value", "values": {"a": "b"}}, "name"),
    ({"name": "ok", "kind": "magic", "values": {"a": "b"}}, "kind"),
    ({"name": "ok", "kind": "value", "purpose": "mining", "values": {"a": "b"}}, "purpose"),
    ({"name": "ok", "kind": "value"}, "values"),
    ({"name": "ok", "kind": "value", "values": {"bad key": "v"}}, "values"),
    ({"name": "ok", "kind": "value", "values": {"..": "v"}}, "values"),
    ({"name": "ok", "kind": "value", "values": {"a": "x" * 32768, "b": "y"}}, "values"),
    ({"name": "ok", "kind": "value", "values": {"a": "b"}, "reference_name": "other"}, "reference_name"),
    ({"name": "ok", "kind": "value", "values": {"a": "b"}, "registry": "r.example"}, "registry"),
    ({"name": "ok", "kind": "reference", "keys": ["k"]}, "reference_name"),
    ({"name": "ok", "kind": "reference", "reference_name": "Bad Name", "keys": ["k"]}, "reference_name"),
    ({"name": "ok", "kind": "reference", "reference_name": "portal-secret-x", "keys": ["k"]}, "reference_name"),
    ({"name": "ok", "kind": "reference", "reference_name": "s"}, "keys"),
    ({"name": "ok", "kind": "reference", "reference_name": "s", "keys": ["a b"]}, "keys"),
    ({"name": "ok", "kind": "reference", "reference_name": "s", "keys": ["k"], "values": {"k": "v"}}, "values"),
    ({"name": "ok", "kind": "reference", "purpose": "image-pull", "reference_name": "s", "keys": ["k"]}, "keys"),
    ({"name": "ok", "kind": "value", "purpose": "image-pull", "values": {"password": "p"}, "username": "u"},
     "registry"),
    ({"name": "ok", "kind": "value", "purpose": "image-pull", "values": {"password": "p"},
      "registry": "https://r.example", "username": "u"}, "registry"),
    ({"name": "ok", "kind": "value", "purpose": "image-pull", "values": {"password": "p"},
      "registry": "r.example"}, "username"),
    ({"name": "ok", "kind": "value", "purpose": "image-pull", "values": {"token": "p"},
      "registry": "r.example", "username": "u"}, "values"),
    ({"name": "ok", "kind": "value", "values": {"a": 1}}, "values"),
    ({"name": "ok", "kind": "value", "values": {"a": "b"}, "colour": "red"}, "colour"),
    ("not an object", "non_field_errors"),
]


@pytest.mark.parametrize(("body", "field"), BAD)
def test_bad_declarations_are_400_field_errors(lab, client_for, body, field):
    r = client_for(lab.vadmin).post("/api/v1/secrets", body, format="json")
    assert r.status_code == 400, r.json()
    assert any(f.split(".")[0] == field for f in r.json()["error"]["fields"]), r.json()
    assert not DepartmentSecret.objects.exists()


def test_bad_rotation_is_a_400_and_changes_nothing(lab, client_for, wandb):
    c = client_for(lab.vadmin)
    assert c.patch("/api/v1/secrets/wandb", {"values": {}}, format="json").status_code == 400
    assert c.patch("/api/v1/secrets/wandb", {"keys": ["a"]}, format="json").status_code == 400
    assert c.patch("/api/v1/secrets/wandb", {"reference_name": "x"}, format="json").status_code == 400
    assert DepartmentSecret.objects.get().values == {"api_key": WANDB_KEY}


# --------------------------------------------------------------------------- jobs
@pytest.fixture
def hf(lab, client_for):
    r = create(client_for(lab.vadmin), name="hf", kind="reference", reference_name="hf-token", keys=["token"])
    assert r.status_code == 201
    r = create(client_for(lab.nadmin), name="nlp-only", kind="value", values={"k": "v"})
    assert r.status_code == 201


def test_job_uses_secrets_as_env_and_files_and_shows_names_only(lab, client_for, payload, wandb, hf):
    uses = [{"secret": "wandb", "key": "api_key", "env": "WANDB_API_KEY"}, {"secret": "hf", "path": "/etc/secrets/hf"}]
    r = client_for(lab.alice).post("/api/v1/jobs", payload(secrets=uses), format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["secrets"] == uses and body["warnings"] == []
    assert WANDB_KEY not in r.content.decode()
    detail = client_for(lab.alice).get(f"/api/v1/jobs/{body['id']}").content.decode()
    assert WANDB_KEY not in detail and "WANDB_API_KEY" in detail


JOB_BAD = [
    ([{"secret": "nope", "key": "k", "env": "X"}], "no such secret"),
    ([{"secret": "nlp-only", "key": "k", "env": "X"}], "no such secret"),  # another department's: missing
    ([{"secret": "wandb", "key": "nokey", "env": "X"}], "has no key"),
    ([{"secret": "wandb", "key": "api_key", "env": "1BAD"}], "valid variable name"),
    ([{"secret": "wandb", "key": "api_key", "env": "PORTAL_TOKEN"}], "reserved"),
    ([{"secret": "wandb", "key": "api_key", "env": "CUDA_VISIBLE_DEVICES"}], "reserved"),
    ([{"secret": "wandb", "key": "api_key", "env": "PLAIN"}], "also set in 'env'"),
    ([{"secret": "wandb", "key": "api_key", "env": "A"}, {"secret": "wandb", "key": "api_key", "env": "A"}],
     "set by 2"),
    ([{"secret": "wandb", "env": "A"}], "'key'"),
    ([{"secret": "wandb", "key": "api_key"}], "'env' must be"),
    ([{"secret": "hf", "path": "/proc/x"}], "under /proc"),
    ([{"secret": "hf", "path": "/dev/shm/hf"}], "under /dev"),
    ([{"secret": "hf", "path": "relative"}], "absolute"),
    ([{"secret": "hf", "path": "/etc/../proc"}], "normalised"),
    ([{"secret": "hf", "path": "/"}], "normalised"),
    ([{"secret": "hf", "path": "/s"}, {"secret": "wandb", "path": "/s/w"}], "overlaps"),
    ([{"secret": "hf", "path": "/s", "env": "A", "key": "token"}], "not both"),
    ([{"secret": "hf", "colour": "red"}], "unknown field"),
    ([{"secret": "Bad!"}], "must name"),
    (["wandb"], "an object"),
    ({"secret": "wandb"}, "A list"),
    ([{"secret": "hf", "path": "/s"}] * 21, "At most"),
]


@pytest.mark.parametrize(("uses", "message"), JOB_BAD)
def test_bad_secret_uses_are_400_on_secrets(lab, client_for, payload, wandb, hf, uses, message):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(secrets=uses, env={"PLAIN": "1"}), format="json")
    assert r.status_code == 400, r.json()
    errors = r.json()["error"]["fields"]["secrets"]
    assert any(message in e["message"] for e in errors), errors


def test_batch_reports_the_item_that_names_a_missing_secret(lab, client_for, payload, wandb):
    jobs = [payload(), payload(secrets=[{"secret": "nope", "key": "k", "env": "X"}])]
    r = client_for(lab.alice).post("/api/v1/jobs/batch", {"jobs": jobs}, format="json")
    assert r.status_code == 400 and "jobs.1.secrets" in r.json()["error"]["fields"]


@pytest.mark.parametrize("value", [
    "hf_" + "a1B2c3D4e5F6g7H8i9J0k", "ghp_" + "A" * 36, "sk-" + "x9" * 20, WANDB_KEY,
    "xoxb-1234567890-abcdefghijklmnop", "AKIAIOSFODNN7EXAMPLE", "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eA9z",
])
def test_token_like_env_is_accepted_with_a_warning_pointing_to_secrets(lab, client_for, payload, value):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(env={"SOMETHING": value}), format="json")
    assert r.status_code == 201
    [warning] = r.json()["warnings"]
    assert "SOMETHING" in warning and "secret" in warning and value not in warning


@pytest.mark.parametrize("value", ["1", "resnet50", "/data/imagenet", "s3://bucket/path/to/data", "true",
                                   "meta-llama/Llama-3.1-8B-Instruct", "0.0001"])
def test_ordinary_env_gets_no_warning(lab, client_for, payload, value):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(env={"MODEL": value}), format="json")
    assert r.status_code == 201 and r.json()["warnings"] == []


def _stored_token() -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT values_encrypted FROM workloads_departmentsecret")
        return cur.fetchone()[0]


def test_a_key_rotation_re_encrypts_department_secrets(lab, settings, capsys):
    from django.core.management import call_command

    from workloads.services import secrets

    settings.FIELD_ENCRYPTION_KEYS = ["old key, long and random"]
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": WANDB_KEY})
    before = _stored_token()
    settings.FIELD_ENCRYPTION_KEYS = ["new key, long and random", "old key, long and random"]
    call_command("rotate_field_keys")
    assert "re-encrypted 1 department secret(s)" in capsys.readouterr().out
    assert _stored_token() != before
    settings.FIELD_ENCRYPTION_KEYS = ["new key, long and random"]  # the old key dropped: still readable
    assert DepartmentSecret.objects.get().values == {"api_key": WANDB_KEY}


def test_a_secret_no_key_reads_is_named_by_the_rotation_and_used_by_no_pod(lab, settings):
    from django.core.management import CommandError, call_command

    from workloads.services import secrets

    settings.FIELD_ENCRYPTION_KEYS = ["the key that was lost"]
    secrets.secret_create(actor=lab.vadmin, department=lab.vision, name="wandb", kind="value",
                          values={"api_key": WANDB_KEY})
    settings.FIELD_ENCRYPTION_KEYS = ["another key"]
    assert DepartmentSecret.objects.get().values == {}
    assert secrets.resolve(department_id=lab.vision.pk, uses=[{"secret": "wandb", "key": "api_key",
                                                               "env": "K"}]).owned == ()
    with pytest.raises(CommandError, match="department secret"):
        call_command("rotate_field_keys")


def test_an_empty_patch_changes_nothing(lab, client_for, wandb):
    r = client_for(lab.vadmin).patch("/api/v1/secrets/wandb", {}, format="json")
    assert r.status_code == 200 and r.json()["version"] == 1
    assert not AuditEntry.objects.filter(action="secret.update").exists()
