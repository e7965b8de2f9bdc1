"""Walk the whole URLconf as signed-in members of another department, with real objects seeded in both
departments: no page or endpoint, under any verb, shows or changes anything of the department that is not
theirs.

The routes come from the resolver, so a new page or endpoint is walked without touching this file; a route
whose URL names something this walk does not know how to fill in fails ``test_every_parameter_is_known``.

The rule checked (docs/architecture.md, "Tenancy"): a URL that names another department's object answers 404
(or 405 when the verb does not exist there), whatever the verb and the body; any other URL never answers 5xx
and never shows another department's data; and afterwards nothing of the other department has changed.

Here a researcher of the other department walks; ``test_cross_tenant_walk_admin.py``, its department admin (two
files, so that ``--dist loadfile`` runs the two walks on two workers). The seeding and the walker are in
``tests/portal/tenant_walk.py``.
"""

from __future__ import annotations

import pytest

from tests.portal.tenant_walk import (
    KNOWN_PARAMS,
    NOTHING_FOUND,
    ROUTES,
    SECRETS,
    VISION_NUMBERS,
    route_params,
    seed,
    walk_as,
)

pytestmark = pytest.mark.django_db


def test_another_departments_researcher_sees_and_changes_nothing_of_it(lab):
    assert walk_as(lab, lab.bob) == NOTHING_FOUND


def test_the_walk_would_see_a_leak(lab, client):
    """The secrets are really on the pages the walk reads, for those who may see them: a platform admin
    sees them on the same URLs, so the walk above cannot pass by looking in the wrong place."""
    seeded = seed(lab, lab.vision, lab.alice, lab.vadmin, "vision", VISION_NUMBERS)
    client.force_login(lab.root)
    shown = set()
    for path in ("/", "/budgets/vision/", "/budgets/allowances/", "/budgets/approvals/", "/api/v1/ledger",
                 "/api/v1/wallets/vision", "/api/v1/allowances", f"/api/v1/jobs/{seeded['jobs']['running'].pk}"):
        content = client.get(path).content
        shown |= {k for k, v in SECRETS.items() if v.encode() in content}
    assert {"job", "ledger", "balance", "refill", "approval_cost", "allowance"} <= shown
    assert {"user_limit", "department_limit"} <= {k for k, v in SECRETS.items()
                                                   if v.encode() in client.get("/api/v1/user-limits").content}
    assert {"user_limit", "department_limit"} <= {
        k for k, v in SECRETS.items() if v.encode() in client.get("/lab/departments/vision/limits").content}
    client.force_login(lab.alice)
    # the whole queue names a queued job to its own department, on the API and the page the walk reads
    assert b"visionsecretjob-queued" in client.get("/api/v1/queue").content
    assert b"visionsecretjob-queued" in client.get("/queue/").content
    assert SECRETS["token"].encode() in client.get("/api/v1/tokens").content
    assert SECRETS["template"].encode() in client.get("/api/v1/templates").content
    assert SECRETS["webhook"].encode() in client.get("/api/v1/notifications/webhooks").content
    assert SECRETS["notification"].encode() in client.get("/api/v1/notifications").content
    assert SECRETS["secret_key"].encode() in client.get("/api/v1/secrets").content
    assert SECRETS["secret_key"].encode() in client.get("/lab/secrets/").content
    client.force_login(lab.vadmin)
    assert b"visionsecrethook-dept" in client.get("/api/v1/notifications/webhooks").content
    assert SECRETS["threshold"].encode() in client.get("/api/v1/notifications/department").content


def test_the_walk_covers_the_dashboard_and_the_api():
    names = {n for _, n in ROUTES}
    assert {"allowances", "wallet", "job", "job-detail", "allowance-detail", "wallet-detail", "token-revoke",
            "approval-approve", "report-usage", "ledger-list", "quota-detail", "whatif", "approve", "cancel",
            "adjust", "refill_rule", "approval_rule", "allowance_delete", "job-cost", "job-logs", "webhook-detail",
            "webhook-rotate", "webhook-list", "notification-list", "notification-preferences",
            "notification-department", "preferences", "unsubscribe", "template-list", "template-detail",
            "job-spec", "templates", "template-edit", "template-delete", "queue", "user-limit-list",
            "user-limit-detail", "department-user-limit", "limits", "connect", "job-connect", "session-auth",
            "session-exchange"} <= names


def test_every_parameter_is_known():
    """A route with a parameter this walk cannot fill in would be walked with a wrong URL: name it here."""
    unknown = {(r, p) for r, _ in ROUTES for p in route_params(r) if p not in KNOWN_PARAMS}
    assert unknown == set()
