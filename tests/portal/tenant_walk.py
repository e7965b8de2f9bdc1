"""The cross-tenant walk (tests/portal/test_cross_tenant_walk.py and ``_admin.py``): objects of every kind
seeded in a department, and a walker that requests every route of the URLconf, under every verb, as members of
another department, collecting what it must never see: a 5xx, a secret of the seeded department in a response,
and any answer but 404 (or 405) to a URL that names that department's object.

The walk of one user is about 4,400 requests; the two walkers (a researcher and a department admin) are in two
files so that ``--dist loadfile`` runs them on two workers at once."""

from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from datetime import timedelta

from django.test import Client, override_settings
from django.utils import timezone

from notifications.models import Delivery, DepartmentSettings, Event, Preference, Webhook
from portal.audit import audit
from portal.models import ApiToken, AuditEntry, Department, Membership, Team
from quotas.models import (
    Allowance,
    ApprovalRule,
    LedgerEntry,
    Price,
    Quota,
    QuotaChangeRequest,
    RefillRule,
    TeamQuota,
    UserLimit,
    Wallet,
)
from quotas.services import allowances, quota_requests, rules, user_limits, wallets
from scheduling.models import (
    Approval,
    AttemptLog,
    Booking,
    DepartmentSample,
    Job,
    JobArray,
    JobDependency,
    JobEvent,
    JobState,
    JobTemplate,
    SessionGrant,
)
from scheduling.services.templates import template_create
from tests.portal.test_urls_require_auth import ALL_ROUTES
from workloads.models import DepartmentSecret
from workloads.services import secrets as department_secrets

# Values that exist only in the seeded department: any of them in a response is a leak.
SECRETS = {"job": "visionsecretjob", "token": "visionsecrettoken", "ledger": "visionsecretledger",
           "audit": "visionsecretaudit", "balance": "777777001", "refill": "4242421", "approval_cost": "5353531",
           "allowance": "6464641", "log": "visionsecretlog", "sample": "8181811", "webhook": "visionsecrethook",
           "webhook_secret": "visionwhsecret", "notification": "visionsecretnotification", "threshold": "8585851",
           "quota_request": "visionsecretquotarequest", "template": "visionsecrettemplate",
           "secret_value": "visionsecretvalue", "secret_key": "visionsecretkeyname", "user_limit": "7373731",
           "department_limit": "7373732", "booking": "visionsecretbooking", "team": "visionsecretteam"}
SKIPPED = ("admin/", "static", "logout/", "login/", "api/schema/", "api/docs/", "api/redoc/", "metrics",
           "healthz", "readyz")
METHODS = ("get", "post", "put", "patch", "delete")
# Bodies a write could succeed with somewhere (an empty one too): a missing gate must not hide behind a 400.
API_BODIES = [{}, {"comment": "x"}, {"balance": 1, "comment": "x"}, {"amount": 1, "comment": "x"},
              {"mode": "fixed", "amount": 1, "period": "monthly", "active": True}, {"gpus_above": 1},
              {"limit": 1, "period": "monthly"}, {"nominal": 0}, {"url": "https://example.org/x", "active": False},
              {"budget_low_threshold": 1}, {"preferences": [{"kind": "job.failed", "email": True}]},
              {"max_gpus": 1, "max_queued": 1}]
FORM_BODIES = [{}, {"comment": "x"}, {"direction": "credit", "amount": "1", "comment": "x", "idempotency_key": "k"},
               {"mode": "fixed", "amount": "1", "period": "monthly", "active": "on"}, {"gpus_above": "1"},
               {"user": "alice", "max_gpus": "1"}, {"action": "remove", "user": "alice"}]
# Parameters that name another department's object, by route name; everything else a parameter can name
# (a flavor, a price) belongs to no department.
FOREIGN_PARAMS = {"pk", "slug", "username"}
# ids of the lab's own objects, not a department's: the walk's non-admins get 403 on them, which names nothing
# (the policy tuner's proposals are platform admins' alone; a maintenance window belongs to no department either:
# every member reads it, platform admins change it)
GLOBAL_PK_ROUTES = {"price-detail", "price_delete", "maintenance-detail", "policy-proposal-detail",
                    "policy-proposal-apply", "policy-proposal-dismiss", "proposal-decide"}
KNOWN_PARAMS = FOREIGN_PARAMS | {"name", "format", "token", "group", "verb", "uidb64", "team", "flavor"}


def seed(lab, dept, owner, admin, prefix, numbers):
    """Objects of every kind in ``dept``: jobs in every state, a wallet with holds, a charge and an
    adjustment, refill and approval rules, an allowance, a token, audit entries, an approval waiting."""
    team = Team.objects.create(department=dept, slug=f"{prefix}secretteam", name=f"{prefix}secretteam")
    TeamQuota.objects.create(team=team, flavor=lab.a100, nominal=1)
    jobs = {}
    for state in JobState.values:
        jobs[state] = Job.objects.create(owner=owner, department=dept, name=f"{prefix}secretjob-{state}", image="x",
                                         command=["true"], flavor=lab.a100, gpus_per_pod=1, state=state,
                                         reason_message="needs approval" if state == "pending_approval" else "")
        JobEvent.objects.create(job=jobs[state], kind="note", message=f"{prefix}secretjob event")
    # a running session with its owner's grant: its Connect, route exchange and forward-auth URLs are walked
    jobs["session"] = Job.objects.create(owner=owner, department=dept, name=f"{prefix}secretjob-session", image="x",
                                         command=[], flavor=lab.a100, gpus_per_pod=1, state=JobState.RUNNING,
                                         kind="session", port=8888, readiness_path="/", ready=True)
    SessionGrant.objects.create(job=jobs["session"], user=owner, code_hash=f"{prefix}code".ljust(64, "0"),
                                code_expires_at=timezone.now(), expires_at=timezone.now(), token_hash="")
    AttemptLog.objects.create(job=jobs["succeeded"], attempt=1, text=f"{prefix}secretlog line")
    # a sweep: an array with a queued task, and the queued job waiting for it and for the running job
    array = JobArray.objects.create(owner=owner, department=dept, name=f"{prefix}secretarray", indices="0", size=1)
    Job.objects.create(owner=owner, department=dept, name=f"{prefix}secretjob-task", image="x", command=["true"],
                       flavor=lab.a100, gpus_per_pod=1, state="queued", array=array, array_index=0)
    JobDependency.objects.create(job=jobs["queued"], condition="afterok", on_array=array)
    JobDependency.objects.create(job=jobs["queued"], condition="afterany", on_job=jobs["running"])
    DepartmentSample.objects.create(at=timezone.now(), department=dept, flavor=lab.a100, nominal=3,
                                    busy_gpus=numbers[4], borrowed_gpus=0)
    wallets.wallet_create(department=dept, actor=lab.root, balance=numbers[0])
    wallets.wallet_adjust(department=dept, amount=5, actor=lab.root, comment=f"{prefix}secretledger")
    wallets.wallet_hold(job=jobs["running"], attempt=1, amount=1000, rate=1000)
    wallets.wallet_hold(job=jobs["succeeded"], attempt=1, amount=1000, rate=1000)
    wallets.wallet_settle(job=jobs["succeeded"], attempt=1, amount=500, gpu_seconds=1800, outcome="succeeded")
    rules.refill_rule_set(department=dept, actor=lab.root, mode="fixed", amount=numbers[1], period="monthly",
                             active=True)
    rules.approval_rule_set(department=dept, actor=admin, cost_above=numbers[2])
    allowances.allowance_set(user=owner, limit=numbers[3], actor=admin)
    # the queued-jobs limits carry the secrets (a GPU limit is bounded by the quota)
    user_limits.user_limit_set(department=dept, user=owner, max_gpus=1, max_queued=numbers[6], actor=admin)
    user_limits.user_limit_set(department=dept, max_gpus=2, max_queued=numbers[7], actor=admin)
    audit(actor=admin, action="note", obj=dept, department=dept, comment=f"{prefix}secretaudit")
    token, _ = ApiToken.issue(user=owner, name=f"{prefix}secrettoken")
    hook = Webhook.objects.create(department=dept, user=owner, url=f"https://example.org/{prefix}secrethook",
                                  secret=f"{prefix}whsecret-user")
    dept_hook = Webhook.objects.create(department=dept, url=f"https://example.org/{prefix}secrethook-dept",
                                       secret=f"{prefix}whsecret-dept", kinds=["budget.low"])
    Preference.objects.create(user=owner, kind="job.failed", email=False, webhook=True)
    # Named like the flavor the walk fills every ``name`` with, so the secrets' URLs reach this one.
    department_secrets.secret_create(actor=admin, department=dept, name="a100-80gb", kind="value",
                                      values={f"{prefix}secretkeyname": f"{prefix}secretvalue"})
    DepartmentSettings.objects.create(department=dept, budget_low_threshold=numbers[5])
    event = Event.objects.create(kind="job.failed", department=dept, user_ids=[owner.pk], expanded_at=timezone.now(),
                                 data={"job_id": jobs["failed"].pk, "job_name": f"{prefix}secretnotification"})
    Delivery.objects.create(event=event, department=dept, channel="email", user=owner, status="sent",
                            key=f"{event.pk}:email:u{owner.pk}")
    Delivery.objects.create(event=event, department=dept, channel="webhook", webhook=dept_hook, status="failed",
                            key=f"{event.pk}:webhook:w{dept_hook.pk}", last_error=f"{prefix}secretnotification")
    # (4: with the other department's 4, all the 8 GPUs, so the request can be filed)
    request = quota_requests.quota_request_create(department=dept, flavor=lab.a100, actor=admin, nominal=4,
                                                  reason=f"{prefix}secretquotarequest")
    spec = {"name": f"{prefix}secrettemplate-job", "image": "busybox", "command": ["true"], "flavor": "a100-80gb",
            "gpus": 1, "env": {"NOTE": f"{prefix}secrettemplate"}}
    templates = [template_create(user=owner, name=f"{prefix}-personal", spec=spec,
                                 description=f"{prefix}secrettemplate personal"),
                 template_create(user=admin, name=f"{prefix}-shared", spec=spec, scope="department",
                                 description=f"{prefix}secrettemplate shared")]
    # a booking of the department: its purpose and owners are the department's own (the calendar shows the
    # others only GPUs booked by "another department")
    booking = Booking.objects.create(department=dept, cluster=lab.cluster, flavor=lab.a100, gpus=1,
                                     start=timezone.now(), end=timezone.now() + timedelta(days=1),
                                     purpose=f"{prefix}secretbooking")
    booking.users.set([owner])
    return {"jobs": jobs, "pending": jobs["pending_approval"], "array": array, "token": token, "webhooks": [hook, dept_hook],
            "quota_request": request, "templates": templates, "booking": booking,
            "quota": Quota.objects.get(department=dept, flavor=lab.a100)}


def route_params(route: str) -> list[str]:
    return re.findall(r"<(?:\w+:)?(\w+)>", route) + re.findall(r"\(\?P<(\w+)>", route)


def _fill(route: str, values: dict) -> str:
    route = route.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\.", ".")
    route = re.sub(r"\(\?P<format>[^)]*\)", "", route)  # drop optional .json suffixes
    # Regex groups first: ``(?P<pk>...)`` contains ``<pk>``, which the path-converter pattern would eat.
    route = re.sub(r"\(\?P<(\w+)>(?:\[[^\]]*\]|[^)\[])*\)", lambda m: values[m.group(1)], route)
    route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)
    route = route.replace("/?", "/").replace("?", "")
    return "/" + route.lstrip("/")


def _urls(route: str, name: str, seeded, price) -> list[tuple[str, bool]]:
    """(url, names another department's object) for each object of the other department the route can name."""
    params = set(route_params(route)) - {"format"}
    names_foreign = bool(params & FOREIGN_PARAMS) and name not in GLOBAL_PK_ROUTES
    if "pk" not in params:
        pks = [None]
    elif name in GLOBAL_PK_ROUTES:
        pks = [price.pk]
    elif "request" in name:
        pks = [seeded["quota_request"].pk]
    elif "approv" in name or name in ("approve", "reject"):
        pks = [seeded["pending"].pk]
    elif "token" in name:
        pks = [seeded["token"].pk]
    elif "webhook" in name:
        pks = [h.pk for h in seeded["webhooks"]]
    elif "quota" in name:
        pks = [seeded["quota"].pk]
    elif "template" in name:
        pks = [t.pk for t in seeded["templates"]]
    elif "array" in name:
        pks = [seeded["array"].pk]
    elif "booking" in name:
        pks = [seeded["booking"].pk]
    else:  # a job, in every state
        pks = [j.pk for j in seeded["jobs"].values()]
    query = (f"?user=alice&department=vision&job={seeded['pending'].pk}&owner=alice&q=vision"
             f"&template={seeded['templates'][1].pk}&clone={seeded['jobs']['running'].pk}")
    values = {"slug": "vision", "username": "alice", "name": "a100-80gb", "token": "not-a-signed-token", "group": "g",
              "team": "visionsecretteam", "flavor": "a100-80gb",
              "verb": "cancel", "uidb64": "MQ"}  # an account's id in an invitation's link, with a token of no one
    return [(_fill(route, {"pk": str(pk), **values}) + query,
             names_foreign) for pk in pks]


ROUTES = [(r, n) for r, n in ALL_ROUTES if not r.startswith(SKIPPED) and n]


def _request(client, method, url, body, api):
    call = getattr(client, method)
    if method == "get":
        return call(url)
    if api:
        return call(url, data=json.dumps(body), content_type="application/json")
    if method == "post":
        return call(url, data=body)
    return call(url)  # pages take no PUT, PATCH or DELETE: they must answer 405 (or 404) all the same


def walk(lab, seeded, users):
    """(leaks, 5xx answers, answers other than 404/405 to a URL naming the seeded department's object) of the
    walk as each of ``users``."""
    with _lean_requests():
        return _walk(lab, seeded, users)


@contextmanager
def _lean_requests():
    """What each of the walk's requests costs outside the view is most of its time. Sessions in the cache, not
    in a table (the walk signs in once per user and never looks at the session rows), and no log line per
    404/405 (every refused request is one, and the walk counts statuses itself; a 5xx is still logged)."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with override_settings(SESSION_ENGINE="django.contrib.sessions.backends.cache"):
            yield
    finally:
        logger.setLevel(level)


def _walk(lab, seeded, users):
    price = Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    leaks, errors, wrong = [], [], []
    for user in users:
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for route, name in ROUTES:
            api = route.startswith("api/")
            for url, names_foreign in _urls(route, name, seeded, price):
                for method in METHODS:
                    bodies = [None] if method == "get" else (API_BODIES if api else FORM_BODIES)
                    if not names_foreign and method != "get":
                        bodies = bodies[:1]  # creating in one's own department is not a leak
                    for body in bodies:
                        r = _request(client, method, url, body, api)
                        where = f"{user} {method.upper()} {url} ({name}) {body}"
                        if r.status_code >= 500:
                            errors.append(f"{where}: {r.status_code}")
                            continue
                        if names_foreign and r.status_code not in (404, 405):
                            wrong.append(f"{where}: {r.status_code}, expected 404")
                        content = b"" if r.streaming else r.content
                        found = [k for k, v in SECRETS.items() if v.encode() in content]
                        if found:
                            leaks.append(f"{where} shows {found}")
                        if r.status_code == 405:
                            # Refused by its verb before any body is read (Django's and DRF's dispatch): the
                            # other bodies would get the same answer. Skipping them is 6,200 of 15,000 requests.
                            break
    return leaks, errors, wrong


VISION_NUMBERS = (777777001, 4242421, 5353531, 6464641, 8181811, 8585851, 7373731, 7373732)
NLP_NUMBERS = (100000, 2000, 3000, 4000, 5000, 6000, 7000, 8000)


NOTHING_FOUND = {"errors": [], "leaks": [], "wrong": [], "changed": []}


def walk_as(lab, walker) -> dict:
    """Seed both departments, walk as ``walker`` (a member of nlp) and say what the walk found: 5xx answers
    (``errors``), vision's secrets in a response (``leaks``), answers but 404/405 to a URL naming vision's
    object (``wrong``), and what of vision changed (``changed``: each part of ``state`` as before and after)."""
    seeded = seed(lab, lab.vision, lab.alice, lab.vadmin, "vision", VISION_NUMBERS)
    seed(lab, lab.nlp, lab.bob, lab.nadmin, "nlp", NLP_NUMBERS)
    before = state(lab)
    leaks, errors, wrong = walk(lab, seeded, (walker,))
    changed = [(old, new) for old, new in zip(before, state(lab), strict=True) if old != new]
    return {"errors": errors, "leaks": leaks, "wrong": wrong, "changed": changed}


def state(lab):
    """Everything of the vision department a walk could change."""
    vision_jobs = Job.objects.filter(department=lab.vision)
    return (
        sorted(vision_jobs.values_list("name", "state", "attempt", "reason_code", "held_at")),
        sorted(JobDependency.objects.filter(job__department=lab.vision).values_list("job_id", "condition", "on_job_id",
                                                                                     "on_array_id")),
        JobEvent.objects.filter(job__department=lab.vision).count(),
        Approval.objects.filter(job__department=lab.vision).count(),
        Wallet.objects.filter(department=lab.vision).values_list("balance", "held").get(),
        LedgerEntry.objects.filter(wallet__department=lab.vision).count(),
        sorted(RefillRule.objects.filter(department=lab.vision).values_list("mode", "amount", "period", "active")),
        sorted(ApprovalRule.objects.filter(department=lab.vision).values_list("gpus_above", "cost_above",
                                                                               "realtime")),
        sorted(Quota.objects.filter(department=lab.vision).values_list("nominal", "borrowing_limit",
                                                                        "lending_limit")),
        sorted(Allowance.objects.filter(user=lab.alice).values_list("limit", "period")),
        sorted(UserLimit.objects.filter(department=lab.vision).values_list("user_id", "max_gpus", "max_queued"),
               key=lambda r: (r[0] or 0, r[1], r[2])),
        sorted(ApiToken.objects.filter(user=lab.alice).values_list("name", "revoked_at")),
        AuditEntry.objects.filter(department=lab.vision).count(),
        sorted(AttemptLog.objects.filter(job__department=lab.vision).values_list("attempt", "text")),
        sorted(SessionGrant.objects.filter(job__department=lab.vision).values_list("pk", "token_hash", "exchanged_at")),
        sorted(Webhook.objects.filter(department=lab.vision).values_list("url", "secret", "active", "kinds")),
        sorted(Preference.objects.filter(user=lab.alice).values_list("kind", "email", "webhook")),
        sorted(DepartmentSettings.objects.filter(department=lab.vision).values_list("budget_low_threshold")),
        sorted(Delivery.objects.filter(department=lab.vision).values_list("key", "status")),
        sorted(QuotaChangeRequest.objects.filter(department=lab.vision).values_list("nominal", "state")),
        sorted(Membership.objects.filter(department=lab.vision).values_list("user__username", "role",
                                                                               "user_tier")),
        Department.objects.filter(pk=lab.vision.pk).values_list("name", "archived_at").get(),
        sorted(JobTemplate.objects.filter(department=lab.vision).values_list("name", "scope", "description",
                                                                              "spec")),
        sorted(DepartmentSecret.objects.filter(department=lab.vision).values_list("name", "version", "keys")),
    )
