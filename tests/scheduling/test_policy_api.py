"""The scheduling policy: members read it, platform admins change it (validated, versioned, audited), and the
next cycle uses the new version without a restart."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry
from scheduling.models import PolicyVersion

pytestmark = pytest.mark.django_db

codec = pytest.importorskip("engine.policy", reason="the engine's policy codec has not landed")


def test_members_read_the_policy(lab, client_for):
    r = client_for(lab.alice).get("/api/v1/policy")
    assert r.status_code == 200 and r.json()["version"] == 0
    assert r.json()["policy"]["min_runtime_s"] >= 600


def test_only_platform_admins_change_it(lab, client_for):
    body = {"policy": client_for(lab.root).get("/api/v1/policy").json()["policy"]}
    for user in (lab.alice, lab.vadmin):
        assert client_for(user).put("/api/v1/policy", body, format="json").status_code == 403
    assert PolicyVersion.objects.count() == 0


def test_update_is_versioned_audited_and_used_by_the_next_cycle(lab, client_for):
    from scheduling.services.policy import current_policy

    c = client_for(lab.root)
    data = c.get("/api/v1/policy").json()["policy"]
    data["aging_per_minute"] = 7.5
    r = c.put("/api/v1/policy", {"policy": data, "comment": "age faster"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["version"] == 1 and r.json()["author"] == "root"
    policy, version = current_policy()
    assert (version, policy.version, policy.aging_per_minute) == (1, 1, 7.5)
    audit = AuditEntry.objects.get(action="policy.update")
    assert audit.actor == lab.root and audit.new["aging_per_minute"] == 7.5 and audit.comment == "age faster"
    assert [v["version"] for v in c.get("/api/v1/policy/versions").json()] == [1]


@pytest.mark.parametrize(("saved", "band"), [
    ({}, 0.0),  # saved before the priority band existed: it keeps running with one band
    ({"priority_band_weight": 0.0}, 0.0),
    ({"priority_band_weight": 4.0}, 4.0),
])
def test_an_upgrade_does_not_change_what_a_saved_version_does(lab, saved, band):
    from engine.policy import DEFAULT_POLICY, policy_to_dict
    from scheduling.services.policy import current_policy

    assert current_policy()[0].priority_band_weight == DEFAULT_POLICY.priority_band_weight == 2.0  # never saved
    data = {k: v for k, v in policy_to_dict(DEFAULT_POLICY).items() if k not in ("version", "priority_band_weight")}
    PolicyVersion.objects.create(version=1, data={**data, **saved}, author=lab.root, comment="")
    policy, version = current_policy()
    assert (version, policy.priority_band_weight) == (1, band)


@pytest.mark.parametrize("bad", [
    {"aging_per_minute": -1},
    {"min_runtime_s": 60},  # below 10 minutes without the explicit opt-in
    {"no_such_knob": 1},
])
def test_invalid_policy_is_400_and_not_stored(lab, client_for, bad):
    c = client_for(lab.root)
    data = c.get("/api/v1/policy").json()["policy"]
    data.update(bad)
    r = c.put("/api/v1/policy", {"policy": data}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["fields"]
    assert PolicyVersion.objects.count() == 0 and not AuditEntry.objects.exists()
