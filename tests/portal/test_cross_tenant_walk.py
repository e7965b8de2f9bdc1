"""Walk the whole URLconf as signed-in members of another department, with real objects seeded in both
departments: no page or endpoint shows, or changes, anything of the department that is not theirs."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from portal.models import ApiToken
from quotas.models import Allowance, Wallet
from quotas.services import allowances, rules, wallets
from scheduling.models import Job, JobState
from tests.portal.test_urls_require_auth import ALL_ROUTES

pytestmark = pytest.mark.django_db

# Values that exist only in the seeded department: any of them in a response is a leak.
SECRETS = {"job": "visionsecretjob", "approval": "visionsecretapproval", "token": "visionsecrettoken",
           "balance": "777777001", "refill": "4242421", "approval_cost": "5353531", "allowance": "6464641"}
SKIPPED = ("admin/", "static", "logout/", "login/", "api/schema/", "api/docs/", "api/redoc/", "metrics",
           "healthz", "readyz")


def _seed(lab, dept, owner, admin, prefix, numbers):
    job = Job.objects.create(owner=owner, department=dept, name=f"{prefix}secretjob", image="x", command=["true"],
                             flavor=lab.a100, gpus=1, state=JobState.QUEUED)
    pending = Job.objects.create(owner=owner, department=dept, name=f"{prefix}secretapproval", image="x",
                                 command=["true"], flavor=lab.a100, gpus=1, state=JobState.PENDING_APPROVAL,
                                 reason_message="needs approval")
    wallets.wallet_create(department=dept, actor=lab.root, balance=numbers[0])
    rules.refill_rule_set(department=dept, actor=lab.root, mode="fixed", amount=numbers[1], period="monthly",
                             active=True)
    rules.approval_rule_set(department=dept, actor=admin, cost_above=numbers[2])
    allowances.allowance_set(user=owner, limit=numbers[3], actor=admin)
    token, _ = ApiToken.issue(user=owner, name=f"{prefix}secrettoken")
    return {"job": job, "pending": pending, "token": token}


def _url(route: str, name: str, seeded) -> str:
    route = route.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\.", ".")
    route = re.sub(r"\(\?P<format>[^)]*\)", "", route)
    route = route.replace("/?", "/").replace("?", "")
    pk = seeded["job"].pk
    if "approv" in name:
        pk = seeded["pending"].pk
    elif "token" in name:
        pk = seeded["token"].pk
    values = {"pk": str(pk), "slug": "vision", "username": "alice", "name": "a100-80gb"}
    route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), route)
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values.get(m.group(1), "1"), route)
    query = f"?user=alice&department=vision&job={seeded['job'].pk}&owner=alice&q=vision"
    return "/" + route.lstrip("/") + query


ROUTES = [(r, n) for r, n in ALL_ROUTES if not r.startswith(SKIPPED) and n]


def test_another_departments_members_see_and_change_nothing_of_it(lab):
    seeded = _seed(lab, lab.vision, lab.alice, lab.vadmin, "vision", (777777001, 4242421, 5353531, 6464641))
    _seed(lab, lab.nlp, lab.bob, lab.nadmin, "nlp", (1000, 2000, 3000, 4000))
    before = _state(lab)
    leaks, errors = [], []
    for user in (lab.bob, lab.nadmin):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for route, name in ROUTES:
            url = _url(route, name, seeded)
            for method in ("get", "post"):
                r = getattr(client, method)(url)
                if r.status_code >= 500:
                    errors.append(f"{user} {method.upper()} {url} ({name}): {r.status_code}")
                    continue
                body = b"" if r.streaming else r.content
                found = [k for k, v in SECRETS.items() if v.encode() in body]
                if found:
                    leaks.append(f"{user} {method.upper()} {url} ({name}) shows {found}")
    assert errors == []
    assert leaks == []
    assert _state(lab) == before  # and nothing of it changed


def test_the_walk_covers_the_dashboard_and_the_api():
    names = {n for _, n in ROUTES}
    assert {"allowances", "wallet", "job", "job-detail", "allowance-detail", "wallet-detail", "token-revoke",
            "approval-approve", "report-usage", "ledger-list"} <= names


def _state(lab):
    return (
        sorted(Job.objects.filter(department=lab.vision).values_list("name", "state")),
        Wallet.objects.filter(department=lab.vision).values_list("balance", "held").get(),
        sorted(Allowance.objects.filter(user=lab.alice).values_list("limit", "period")),
        sorted(ApiToken.objects.filter(user=lab.alice).values_list("name", "revoked_at")),
    )
