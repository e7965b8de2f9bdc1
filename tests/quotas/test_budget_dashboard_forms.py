"""Dashboard forms for budgets: prices, wallet adjustments, refill rules, approval rules, allowances.

Each form goes through the same service as the API (same ledger entries, same audit entries); bad input
re-renders the form with field errors (400) and writes nothing; each role sees only what it may change."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.models import AuditEntry
from quotas.models import Allowance, ApprovalRule, LedgerEntry, LedgerKind, Price, RefillRule, Wallet
from tests.pages import without_tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser():
    def as_user(user):
        c = Client()
        if user is not None:
            c.force_login(user)
        return c

    return as_user


def _snapshot():
    """Everything a budget form could write."""
    return {
        "audit": AuditEntry.objects.count(),
        "ledger": LedgerEntry.objects.count(),
        "wallets": sorted(Wallet.objects.values_list("department__slug", "balance", "held")),
        "prices": sorted(Price.objects.values_list("flavor__name", "tier", "per_gpu_hour")),
        "refill": sorted(RefillRule.objects.values_list("department__slug", "mode", "amount", "period", "active")),
        "approval": sorted(ApprovalRule.objects.values_list("department__slug", "gpus_above", "cost_above",
                                                            "realtime")),
        "allowances": sorted(Allowance.objects.values_list("user__username", "limit", "period")),
    }


# ------------------------------------------------------------------------------------------ who may do what

PAGES = {
    "prices": "/budgets/prices/",
    "adjust": "/budgets/vision/adjust",
    "refill": "/budgets/vision/refill-rule",
    "approval": "/budgets/vision/approval-rule",
    "allowances": "/budgets/allowances/",
}

# page -> {role: status of GET}, by the one tenancy rule: a page about a department the user cannot see is a 404
# (vision's wallet for nlp's members and for a member of nothing); a department they see but may not act on,
# or a page about no department without the role (a member of nothing included), is a 403.
MATRIX = {
    "prices": {"root": 200, "vadmin": 403, "nadmin": 403, "alice": 403, "bob": 403, "stranger": 403},
    "adjust": {"root": 200, "vadmin": 403, "nadmin": 404, "alice": 403, "bob": 404, "stranger": 404},
    "refill": {"root": 200, "vadmin": 403, "nadmin": 404, "alice": 403, "bob": 404, "stranger": 404},
    "approval": {"root": 200, "vadmin": 200, "nadmin": 404, "alice": 403, "bob": 404, "stranger": 404},
    "allowances": {"root": 200, "vadmin": 200, "nadmin": 200, "alice": 403, "bob": 403, "stranger": 403},
}

# a valid POST per page (what a permitted role would save); the forms take credits, the services store mcr
VALID_POSTS = {
    "prices": {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": "1.2"},
    "adjust": {"direction": "credit", "amount": "5", "comment": "grant", "idempotency_key": "k1"},
    "refill": {"mode": "fixed", "amount": "1", "period": "monthly", "active": "on"},
    "approval": {"gpus_above": "2", "cost_above": "", "realtime": "on"},
    "allowances": {"user": "amy", "limit": "1.5", "period": "monthly"},
}

CASES = [(page, role, status) for page, roles in MATRIX.items() for role, status in roles.items()]


@pytest.mark.parametrize(("page", "role", "status"), CASES)
def test_permissions_matrix_get(money, browser, page, role, status):
    assert browser(getattr(money, role)).get(PAGES[page]).status_code == status


@pytest.mark.parametrize(("page", "role", "status"), [c for c in CASES if c[2] != 200])
def test_permissions_matrix_post_changes_nothing(money, browser, page, role, status):
    before = _snapshot()
    assert browser(getattr(money, role)).post(PAGES[page], VALID_POSTS[page]).status_code == status
    assert _snapshot() == before


@pytest.mark.parametrize("page", PAGES)
def test_anonymous_is_sent_to_login(money, browser, page):
    r = browser(None).get(PAGES[page])
    assert r.status_code == 302 and "/login/" in r["Location"]


def test_delete_buttons_are_scoped(money, browser):
    services_allowance = browser(money.vadmin).post("/budgets/allowances/", {"user": "amy", "limit": "0.01",
                                                                             "period": "weekly"})
    assert services_allowance.status_code == 302
    RefillRule.objects.create(department=money.vision, amount=5)
    price = Price.objects.get(flavor=money.a100, tier="backfill")
    before = _snapshot()
    assert browser(money.nadmin).post("/budgets/allowances/amy/delete").status_code == 404
    assert browser(money.alice).post("/budgets/allowances/amy/delete").status_code == 403
    assert browser(money.vadmin).post(f"/budgets/prices/{price.pk}/delete").status_code == 403
    assert browser(money.vadmin).post("/budgets/vision/refill-rule/delete").status_code == 403
    assert browser(money.root).get("/budgets/allowances/amy/delete").status_code == 405
    assert _snapshot() == before


def test_csrf_is_required(money):
    c = Client(enforce_csrf_checks=True)
    c.force_login(money.root)
    before = _snapshot()
    assert c.post(PAGES["adjust"], VALID_POSTS["adjust"]).status_code == 403
    assert _snapshot() == before
    assert 'name="csrfmiddlewaretoken"' in c.get(PAGES["adjust"]).content.decode()


def test_navigation_links_follow_the_role(money, browser):
    researcher = browser(money.alice).get("/budgets/vision/").content.decode()
    for link in ("/budgets/prices/", "/budgets/allowances/", "/budgets/vision/adjust",
                 "/budgets/vision/refill-rule", "/budgets/vision/approval-rule"):
        assert link not in researcher
    dept_admin = browser(money.vadmin).get("/budgets/vision/").content.decode()
    assert "/budgets/allowances/" in dept_admin and "/budgets/vision/approval-rule" in dept_admin
    assert "/budgets/prices/" not in dept_admin and "/budgets/vision/adjust" not in dept_admin
    assert "/budgets/vision/refill-rule" not in dept_admin
    platform = browser(money.root).get("/budgets/").content.decode()
    for link in ("/budgets/prices/", "/budgets/allowances/", "/budgets/vision/adjust",
                 "/budgets/vision/refill-rule", "/budgets/vision/approval-rule", "/budgets/platform/refill-rule"):
        assert link in platform


# ------------------------------------------------------------------------------------------ happy paths


def _audit(action):
    return AuditEntry.objects.filter(action=action).order_by("-id").first()


def test_platform_admin_sets_edits_and_deletes_prices(money, browser):
    c = browser(money.root)
    r = c.post("/budgets/prices/", {"flavor": "a100-mig-3g.40gb", "tier": "elastic", "per_gpu_hour": "0.4"})
    assert r.status_code == 302 and r["Location"] == "/budgets/prices/"
    price = Price.objects.get(flavor=money.mig, tier="elastic")
    assert price.per_gpu_hour == 400
    a = _audit("price.set")
    assert a.actor == money.root and a.old is None and a.new == {"flavor": "a100-mig-3g.40gb", "tier": "elastic",
                                                                 "per_gpu_hour": 400}
    # edit: the row's link fills the form with the current price, in credits
    page = c.get("/budgets/prices/?flavor=a100-80gb&tier=elastic").content.decode()
    assert 'value="1"' in page
    assert c.post("/budgets/prices/", {"flavor": "a100-80gb", "tier": "elastic",
                                       "per_gpu_hour": "1.2"}).status_code == 302
    assert Price.objects.get(flavor=money.a100, tier="elastic").per_gpu_hour == 1200
    a = _audit("price.set")
    assert a.old == {"per_gpu_hour": 1000} and a.new["per_gpu_hour"] == 1200
    assert c.post(f"/budgets/prices/{price.pk}/delete").status_code == 302
    assert not Price.objects.filter(pk=price.pk).exists()
    a = _audit("price.delete")
    assert a.actor == money.root and a.old == {"flavor": "a100-mig-3g.40gb", "tier": "elastic", "per_gpu_hour": 400}
    assert "1.200 cr" in c.get("/budgets/prices/").content.decode()


def test_platform_admin_credits_and_debits_a_wallet(money, browser, consistent):
    c = browser(money.root)
    page = c.get("/budgets/nlp/adjust").content.decode()
    assert 'name="idempotency_key"' in page and "10.000 cr" in page
    body = {"direction": "credit", "amount": "5", "comment": "Q4 grant", "idempotency_key": "form-1"}
    r = c.post("/budgets/nlp/adjust", body)
    assert r.status_code == 302 and r["Location"] == "/budgets/nlp/"
    assert c.post("/budgets/nlp/adjust", body).status_code == 302  # a double submit adds nothing
    entry = LedgerEntry.objects.filter(wallet__department=money.nlp, kind=LedgerKind.ADJUSTMENT).latest("id")
    assert (entry.amount, entry.memo, entry.actor, entry.balance_after) == (5000, "Q4 grant", money.root, 15_000)
    assert Wallet.objects.get(department=money.nlp).balance == 15_000
    a = _audit("wallet.adjust")
    assert a.department == money.nlp and a.actor == money.root and a.comment == "Q4 grant"
    assert a.old == {"balance": 10_000} and a.new == {"balance": 15_000, "amount": 5000}
    r = c.post("/budgets/nlp/adjust", {"direction": "debit", "amount": "2", "comment": "correction",
                                       "idempotency_key": "form-2"})
    assert r.status_code == 302
    entry = LedgerEntry.objects.filter(wallet__department=money.nlp, kind=LedgerKind.ADJUSTMENT).latest("id")
    assert entry.amount == -2000 and Wallet.objects.get(department=money.nlp).balance == 13_000
    assert AuditEntry.objects.filter(action="wallet.adjust", department=money.nlp).count() == 3  # opening + 2
    consistent()
    assert "correction" in c.get("/budgets/nlp/").content.decode()


def test_platform_admin_creates_edits_and_deletes_a_refill_rule(money, browser):
    c = browser(money.root)
    r = c.post("/budgets/vision/refill-rule", {"mode": "per_nominal_gpu", "amount": "2.5", "period": "weekly",
                                               "active": "on"})
    assert r.status_code == 302
    rule = RefillRule.objects.get(department=money.vision)
    assert (rule.mode, rule.amount, rule.period, rule.active) == ("per_nominal_gpu", 2500, "weekly", True)
    a = _audit("refill_rule.set")
    assert a.old is None and a.new == {"mode": "per_nominal_gpu", "amount": 2500, "period": "weekly",
                                       "active": True} and a.actor == money.root
    assert "10.000 cr" in c.get("/budgets/vision/refill-rule").content.decode()  # 2500 x 4 nominal GPUs
    assert c.post("/budgets/vision/refill-rule", {"mode": "fixed", "amount": "7",
                                                  "period": "monthly"}).status_code == 302  # unticked: paused
    rule.refresh_from_db()
    assert (rule.mode, rule.amount, rule.active) == ("fixed", 7000, False)
    assert _audit("refill_rule.set").old["amount"] == 2500
    assert c.post("/budgets/vision/refill-rule/delete").status_code == 302
    assert not RefillRule.objects.filter(department=money.vision).exists()
    assert _audit("refill_rule.delete").old == {"mode": "fixed", "amount": 7000, "period": "monthly",
                                                "active": False}
    assert c.post("/budgets/vision/refill-rule/delete").status_code == 404


def test_refill_rule_for_a_department_without_wallet_creates_it(money, browser):
    assert not Wallet.objects.filter(department=money.platform).exists()
    r = browser(money.root).post("/budgets/platform/refill-rule", {"mode": "fixed", "amount": "1",
                                                                   "period": "monthly", "active": "on"})
    assert r.status_code == 302
    assert Wallet.objects.filter(department=money.platform).exists()
    assert _audit("wallet.create").department == money.platform


def test_department_admin_sets_the_approval_rule(money, browser):
    c = browser(money.vadmin)
    r = c.post("/budgets/vision/approval-rule", {"gpus_above": "2", "cost_above": "", "realtime": "on"})
    assert r.status_code == 302
    rule = ApprovalRule.objects.get(department=money.vision)
    assert (rule.gpus_above, rule.cost_above, rule.realtime) == (2, None, True)
    a = _audit("approval_rule.set")
    assert a.actor == money.vadmin and a.department == money.vision and a.old is None
    assert a.new == {"gpus_above": 2, "cost_above": None, "realtime": True}
    assert c.post("/budgets/vision/approval-rule", {"gpus_above": "", "cost_above": "5"}).status_code == 302
    rule.refresh_from_db()
    assert (rule.gpus_above, rule.cost_above, rule.realtime) == (None, 5000, False)
    assert _audit("approval_rule.set").old == {"gpus_above": 2, "cost_above": None, "realtime": True}
    assert 'value="5"' in c.get("/budgets/vision/approval-rule").content.decode()


def test_department_admin_sets_and_removes_a_members_allowance(money, browser):
    c = browser(money.vadmin)
    page = c.get("/budgets/allowances/").content.decode()
    assert 'value="amy"' in page and 'value="bob"' not in page  # only their own members to choose from
    r = c.post("/budgets/allowances/", {"user": "amy", "limit": "1.5", "period": "weekly"})
    assert r.status_code == 302
    a = Allowance.objects.get(user=money.amy)
    assert (a.limit, a.period, a.wallet.department) == (1500, "weekly", money.vision)
    audit = _audit("allowance.set")
    assert audit.actor == money.vadmin and audit.department == money.vision
    assert audit.new == {"user": "amy", "limit": 1500, "period": "weekly"}
    assert 'data-allowance="amy"' in c.get("/budgets/allowances/").content.decode()
    assert 'data-allowance="amy"' not in browser(money.nadmin).get("/budgets/allowances/").content.decode()
    assert c.post("/budgets/allowances/amy/delete").status_code == 302
    assert not Allowance.objects.filter(user=money.amy).exists()
    assert _audit("allowance.delete").old == {"limit": 1500, "period": "weekly"}


# ------------------------------------------------------------------------------------------ bad input

BAD = [
    # (who, page, body, field)
    ("root", "adjust", {"direction": "credit", "amount": "-5", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "debit", "amount": "-5", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "credit", "amount": "1.5555", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "credit", "amount": "lots", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "credit", "amount": "", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "credit", "amount": "0", "comment": "x"}, "amount"),
    ("root", "adjust", {"direction": "debit", "amount": "999999", "comment": "x"}, "amount"),  # more than available
    ("root", "adjust", {"direction": "credit", "amount": "5"}, "comment"),
    ("root", "adjust", {"direction": "credit", "amount": "5", "comment": "   "}, "comment"),
    ("root", "adjust", {"direction": "sideways", "amount": "5", "comment": "x"}, "direction"),
    ("root", "prices", {"flavor": "a100-80gb", "tier": "realtime", "per_gpu_hour": "0.9"}, "per_gpu_hour"),
    ("root", "prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": "5"}, "per_gpu_hour"),
    ("root", "prices", {"flavor": "h100-nope", "tier": "elastic", "per_gpu_hour": "10"}, "flavor"),
    ("root", "prices", {"flavor": "a100-80gb", "tier": "gold", "per_gpu_hour": "10"}, "tier"),
    ("root", "prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": "-1"}, "per_gpu_hour"),
    ("root", "prices", {"flavor": "a100-80gb", "tier": "elastic", "per_gpu_hour": "0.0005"}, "per_gpu_hour"),
    ("root", "refill", {"mode": "fixed", "amount": "-5", "period": "monthly"}, "amount"),
    ("root", "refill", {"mode": "fixed", "amount": "ten", "period": "monthly"}, "amount"),
    ("root", "refill", {"mode": "fixed", "amount": "5", "period": "daily"}, "period"),
    ("root", "refill", {"mode": "magic", "amount": "5", "period": "monthly"}, "mode"),
    ("vadmin", "approval", {"gpus_above": "-1", "cost_above": ""}, "gpus_above"),
    ("vadmin", "approval", {"gpus_above": "2.5", "cost_above": ""}, "gpus_above"),
    ("vadmin", "approval", {"gpus_above": "", "cost_above": "-100"}, "cost_above"),
    ("vadmin", "allowances", {"user": "bob", "limit": "100", "period": "monthly"}, "user"),  # nlp's member
    ("vadmin", "allowances", {"user": "ghost", "limit": "100", "period": "monthly"}, "user"),
    ("vadmin", "allowances", {"user": "", "limit": "100", "period": "monthly"}, "user"),
    ("vadmin", "allowances", {"user": "amy", "limit": "-1", "period": "monthly"}, "limit"),
    ("vadmin", "allowances", {"user": "amy", "limit": "1.5005", "period": "monthly"}, "limit"),
    ("vadmin", "allowances", {"user": "amy", "limit": "100", "period": "yearly"}, "period"),
]


@pytest.mark.parametrize(("who", "page", "body", "field"), BAD)
def test_bad_input_rerenders_the_form_with_a_field_error_and_writes_nothing(money, browser, who, page, body,
                                                                           field):
    before = _snapshot()
    r = browser(getattr(money, who)).post(PAGES[page], body)
    assert r.status_code == 400
    html = r.content.decode()
    assert f'data-error-for="{field}"' in html, html
    assert 'id="form-errors"' in html and "Nothing was saved" in html
    assert _snapshot() == before


def test_bad_input_keeps_what_was_typed_and_the_idempotency_key(money, browser):
    r = browser(money.root).post(PAGES["adjust"], {"direction": "debit", "amount": "1.5555", "comment": "typo fix",
                                                   "idempotency_key": "same-key"})
    html = r.content.decode()
    assert r.status_code == 400 and 'value="typo fix"' in html and 'value="same-key"' in html
    assert '<option value="debit" selected' in html


# ------------------------------------------------------------------------------------------ amounts in credits

# (who, page, a valid body, the amount's field, whether the API's field takes a negative amount here)
AMOUNT_FIELDS = [
    ("root", "prices", {"flavor": "a100-mig-3g.40gb", "tier": "elastic"}, "per_gpu_hour"),
    ("root", "adjust", {"direction": "credit", "comment": "grant", "idempotency_key": "k"}, "amount"),
    ("root", "refill", {"mode": "fixed", "period": "monthly", "active": "on"}, "amount"),
    ("vadmin", "approval", {"gpus_above": ""}, "cost_above"),
    ("vadmin", "allowances", {"user": "amy", "period": "monthly"}, "limit"),
]

BAD_AMOUNTS = [
    ("lots", "Enter an amount in credits, e.g. 12.5."),
    ("1e3", "Enter an amount in credits, e.g. 12.5."),  # no exponents: what is stored is what was read
    ("1,000", "Enter an amount in credits, e.g. 12.5."),
    ("NaN", "Enter an amount in credits, e.g. 12.5."),
    ("-", "Enter an amount in credits, e.g. 12.5."),
    ("12.3456", "Use at most 3 decimals: 0.001 credits is the smallest amount."),
    ("0.0001", "Use at most 3 decimals: 0.001 credits is the smallest amount."),
    ("-2.5", None),  # the form's own wording, checked below
    ("1" + "0" * 20, "Too large: enter at most"),
    ("9" * 40, "Too large: enter at most"),
]


@pytest.mark.parametrize(("who", "page", "body", "field"), AMOUNT_FIELDS)
@pytest.mark.parametrize(("typed", "message"), BAD_AMOUNTS)
def test_every_amount_field_refuses_what_is_not_credits_in_credits(money, browser, who, page, body, field, typed,
                                                                  message):
    before = _snapshot()
    r = browser(getattr(money, who)).post(PAGES[page], {**body, field: typed})
    assert r.status_code == 400
    html = r.content.decode()
    error = html.split(f'data-error-for="{field}">', 1)[1].split("</p>", 1)[0]
    if message is None:
        assert error in ("Enter 0 or more credits.",
                         "Enter a positive amount of credits; choose debit to take credits away.")
    else:
        assert error.startswith(message), error
    assert "mcr" not in error and "Nothing was saved" in html
    assert f'value="{typed}"' in html  # what was typed stays in the field, to be corrected
    assert _snapshot() == before


def test_the_largest_amount_the_api_takes_is_said_in_credits(money, browser):
    r = browser(money.root).post(PAGES["prices"], {"flavor": "a100-mig-3g.40gb", "tier": "elastic",
                                                   "per_gpu_hour": "1000000000.001"})
    assert r.status_code == 400 and "Too large: enter at most 1,000,000,000 credits." in r.content.decode()
    assert browser(money.root).post(PAGES["prices"], {"flavor": "a100-mig-3g.40gb", "tier": "elastic",
                                                      "per_gpu_hour": "1000000000"}).status_code == 302
    assert Price.objects.get(flavor=money.mig, tier="elastic").per_gpu_hour == 10**12  # the API's own maximum


def test_amount_fields_are_decimal_inputs_labelled_in_credits(money, browser):
    for who, page, _, field in AMOUNT_FIELDS:
        html = browser(getattr(money, who)).get(PAGES[page]).content.decode()
        tag = html.split(f'name="{field}"', 1)[1].split(">", 1)[0]
        assert 'step="0.001"' in tag and 'min="0"' in tag and 'type="number"' in tag
        label = html.split(f'name="{field}"', 1)[0].rsplit("<label>", 1)[1]
        assert "credits" in label and "mcr" not in label
        assert "mcr" not in without_tokens(html) and "milli" not in without_tokens(html)


def test_what_a_person_types_is_what_they_see_back(money, browser, consistent):
    root, vadmin = browser(money.root), browser(money.vadmin)
    # a price: the table and the edit form
    assert root.post(PAGES["prices"], {"flavor": "a100-mig-3g.40gb", "tier": "elastic",
                                       "per_gpu_hour": "12.345"}).status_code == 302
    assert Price.objects.get(flavor=money.mig, tier="elastic").per_gpu_hour == 12_345
    assert "12.345 cr" in root.get(PAGES["prices"]).content.decode()
    assert 'value="12.345"' in root.get(f"{PAGES['prices']}?flavor=a100-mig-3g.40gb&tier=elastic").content.decode()
    # a whole number and trailing zeros come back as the plain number
    assert root.post(PAGES["prices"], {"flavor": "a100-mig-3g.40gb", "tier": "elastic",
                                       "per_gpu_hour": "7.500"}).status_code == 302
    assert 'value="7.5"' in root.get(f"{PAGES['prices']}?flavor=a100-mig-3g.40gb&tier=elastic").content.decode()
    # an adjustment: the ledger and the balance
    r = root.post(PAGES["adjust"], {"direction": "credit", "amount": "12.345", "comment": "grant",
                                    "idempotency_key": "rt"}, follow=True)
    html = r.content.decode()
    assert "+12.345 cr recorded (balance 112.345 cr)" in html and "112.345 cr" in html
    assert Wallet.objects.get(department=money.vision).balance == 112_345
    r = root.post(PAGES["adjust"], {"direction": "debit", "amount": "0.345", "comment": "round",
                                    "idempotency_key": "rt2"}, follow=True)
    assert "-0.345 cr recorded (balance 112.000 cr)" in r.content.decode()
    consistent()
    # a refill rule
    assert root.post(PAGES["refill"], {"mode": "fixed", "amount": "12.345", "period": "monthly",
                                       "active": "on"}).status_code == 302
    assert RefillRule.objects.get(department=money.vision).amount == 12_345
    html = root.get(PAGES["refill"]).content.decode()
    assert 'value="12.345"' in html and "12.345 cr" in html
    # an approval rule
    assert vadmin.post(PAGES["approval"], {"gpus_above": "", "cost_above": "12.345"}).status_code == 302
    assert ApprovalRule.objects.get(department=money.vision).cost_above == 12_345
    assert 'value="12.345"' in vadmin.get(PAGES["approval"]).content.decode()
    assert "above 12.345 cr" in vadmin.get("/budgets/vision/").content.decode()
    # an allowance
    assert vadmin.post(PAGES["allowances"], {"user": "amy", "limit": "12.345", "period": "weekly"}).status_code == 302
    assert Allowance.objects.get(user=money.amy).limit == 12_345
    assert "12.345 cr" in vadmin.get(PAGES["allowances"]).content.decode()
    assert 'value="12.345"' in vadmin.get(f"{PAGES['allowances']}?user=amy").content.decode()


def test_a_refused_amount_keeps_its_decimals_in_the_field(money, browser):
    r = browser(money.root).post(PAGES["adjust"], {"direction": "credit", "amount": "12.345", "comment": "",
                                                   "idempotency_key": "k"})
    assert r.status_code == 400 and 'value="12.345"' in r.content.decode()  # the comment was missing
