"""Dashboard pages for budgets (mounted under /budgets/, namespace ``budgets``; the approvals inbox at
/budgets/approvals/ is scheduling's, scheduling/views/approvals.py).

Server-rendered over the same services as the API, and read through the same tenancy gate
(``restrict``/``get_or_404``): another department's wallet is a 404.

The admin forms (prices, wallet adjustments, refill rules, approval rules, allowances) are plain HTML forms
read by the API's own input serializers and applied by the same service functions the API calls, so the
dashboard and the API accept exactly the same input, write the same ledger entries and the same audit
entries. The forms show and take amounts in credits with up to three decimals; ``portal.forms.credit_fields``
turns them into the API's integer mcr at the form's edge (within the serializer's own bounds), and a saved
amount is shown back in credits, as typed. Bad input re-renders the form with field errors (HTTP 400) and writes nothing. A missing role is a
403, another department's object a 404 (as in the API; portal/tenancy.py)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from portal.errors import NotFound
from portal.forms import credit_fields, form_payload, render_form, submit_form
from portal.models import Department, Membership
from portal.money import credits_value, format_credits
from portal.tenancy import ADMIN, CHANGE, VIEW, member, require_role
from quotas.api.budgets import (
    AdjustSerializer,
    AllowanceSerializer,
    ApprovalRuleSerializer,
    PriceInputSerializer,
    RefillRuleSerializer,
)
from quotas.models import TIER_NAMES, Allowance, ApprovalRule, Flavor, LedgerEntry, Price, RefillRule, Wallet
from quotas.services import allowances as allowance_services
from quotas.services import periodic, pricing, reports, rules, settlement
from quotas.services import wallets as wallet_services


@login_required
def wallets(request):
    """Platform admins: every wallet. Members: straight to their department's wallet."""
    m = member(request.user)
    if not m.is_platform_admin:
        return redirect("budgets:wallet", slug=m.department.slug)
    wallets = Wallet.objects.restrict(request.user, VIEW).select_related("department").order_by("department__slug")
    wallets = list(wallets)
    burns = reports.burn_rates(wallets=wallets)
    rows = [(w, burns[w.pk]) for w in wallets]
    unmetered = Department.objects.filter(wallet__isnull=True).order_by("slug")
    return render(request, "quotas/wallets.html", {"membership": m, "rows": rows, "unmetered": unmetered,
                                                    "prices": Price.objects.select_related("flavor")})


@login_required
def wallet(request, slug: str):
    w = Wallet.objects.select_related("department").get_or_404(request.user, VIEW, department__slug=slug)
    m = member(request.user)
    month = timezone.localdate().replace(day=1)
    since, _ = reports.month_bounds(month)
    entries = list(LedgerEntry.objects.restrict(request.user, VIEW).filter(wallet=w)
                   .select_related("wallet__department", "user", "actor", "flavor").order_by("-created_at", "-id")[:30])
    for e in entries:  # a resizable attempt's entries say what each lot held, was charged and got back
        e.lots = settlement.entry_lots(e)
    return render(request, "quotas/wallet.html", {
        "membership": m, "wallet": w, "burn": reports.burn_rate(wallet=w),
        "holds": wallet_services.open_holds(wallet=w),
        "entries": entries,
        "usage": reports.usage_report(entries=LedgerEntry.objects.restrict(request.user, VIEW), group_by=["user", "flavor"], period="month",
                                       since=since, department=slug),
        "refill_rule": RefillRule.objects.filter(department=w.department).first(),
        "approval_rule": ApprovalRule.objects.filter(department=w.department).first(),
        "is_admin": m.is_department_admin,
        "is_platform_admin": m.is_platform_admin,
    })


# ------------------------------------------------------------------------------------------ admin forms


def _department(request, slug: str, action=VIEW) -> Department:
    """The department in the URL, through the tenancy gate (404 unless visible, 403 unless allowed)."""
    return Department.objects.get_or_404(request.user, action, slug=slug)


def _rule_page(request, slug: str, action, model):
    """What a department's rule page (refill, approval) starts from: the department through the tenancy gate,
    the viewer's membership and the rule, if the department has one."""
    dept = _department(request, slug, action)
    return dept, member(request.user), model.objects.filter(department=dept).first()


# A price's amounts, in credits on the page: a GPU flavor's per GPU-hour, a CPU pool's per core-hour and GiB-hour.
PRICE_FIELDS = ("per_gpu_hour", "per_core_hour", "per_gib_hour")


@login_required
@require_http_methods(["GET", "POST"])
def prices(request):
    """Platform admins: set (create or change) and delete the base price of a flavor in a tier."""
    m = require_role(request.user, ADMIN)
    errors: dict = {}
    values = request.GET.dict()
    if request.method == "POST":
        values = request.POST.dict()

        def apply(data):
            price, created = pricing.price_set(actor=request.user, **data)
            amount = (f"{format_credits(price.per_core_hour)} per core-hour and {format_credits(price.per_gib_hour)} "
                      "per GiB-hour") if price.flavor.is_cpu else f"{format_credits(price.per_gpu_hour)} per GPU-hour"
            messages.success(request, f"Price of {price.flavor.name}/{price.tier} "
                                      f"{'set' if created else 'changed'}: {amount}.")

        payload = form_payload(request.POST, ("flavor", "tier", *PRICE_FIELDS))
        errors = submit_form(PriceInputSerializer, payload, apply,
                             credit_fields(payload, PriceInputSerializer, PRICE_FIELDS))
        if not errors:
            return redirect("budgets:prices")
    elif "flavor" in values and "tier" in values and not any(f in values for f in PRICE_FIELDS):
        current = Price.objects.filter(flavor__name=values["flavor"], tier=values["tier"]).first()
        if current is not None:  # a GPU flavor's price per GPU-hour, a CPU pool's per core-hour and GiB-hour
            fields = ("per_core_hour", "per_gib_hour") if current.flavor.is_cpu else ("per_gpu_hour",)
            values.update({f: credits_value(getattr(current, f)) for f in fields})
    return render_form(request, "quotas/prices.html", {
        "membership": m, "values": values, "tiers": TIER_NAMES,
        "flavors": Flavor.objects.order_by("name"),
        "prices": Price.objects.select_related("flavor").order_by("flavor__name", "tier"),
    }, errors)


@login_required
@require_POST
def price_delete(request, pk: int):
    require_role(request.user, ADMIN)
    price = Price.objects.select_related("flavor").filter(pk=pk).first()
    if price is None:
        raise NotFound("No such price.")
    pricing.price_delete(price=price, actor=request.user)
    messages.success(request, f"Price of {price.flavor.name}/{price.tier} deleted: that tier is now free.")
    return redirect("budgets:prices")


@login_required
@require_http_methods(["GET", "POST"])
def adjust(request, slug: str):
    """Platform admins: credit or debit a department's wallet with a comment (an audited adjustment entry).
    The form carries an idempotency key, so a double submit adds one entry."""
    w = Wallet.objects.select_related("department").get_or_404(request.user, ADMIN, department__slug=slug)
    m = member(request.user)
    errors: dict = {}
    values = {"direction": "credit", "idempotency_key": uuid.uuid4().hex}
    if request.method == "POST":
        values = request.POST.dict()
        values.setdefault("idempotency_key", "")
        payload = form_payload(request.POST, ("amount", "comment"))
        # The API's amount is signed; here the direction gives the sign, so the amount typed is positive.
        pre = credit_fields(payload, AdjustSerializer, ("amount",),
                            positive="Enter a positive amount of credits; choose debit to take credits away.")
        direction = values.get("direction")
        if direction not in ("credit", "debit"):
            pre["direction"] = ["Choose credit (add) or debit (take away)."]
        key = values["idempotency_key"].strip()[:64]

        def apply(data):
            amount = -data["amount"] if direction == "debit" else data["amount"]
            entry = wallet_services.wallet_adjust(department=w.department, amount=amount, actor=request.user,
                                           comment=data["comment"], key=f"adjust:{w.pk}:{key}" if key else None)
            sign = "+" if entry.amount >= 0 else ""
            messages.success(request, f"Wallet {slug}: {sign}{format_credits(entry.amount)} recorded (balance "
                                      f"{format_credits(entry.balance_after)}).")

        errors = submit_form(AdjustSerializer, payload, apply, pre)
        if not errors:
            return redirect("budgets:wallet", slug=slug)
    return render_form(request, "quotas/adjust.html", {"membership": m, "wallet": w, "values": values}, errors)


@login_required
@require_http_methods(["GET", "POST"])
def refill_rule(request, slug: str):
    """Platform admins: create or change a department's refill rule (a wallet is created if missing)."""
    dept, m, rule = _rule_page(request, slug, ADMIN, RefillRule)
    errors: dict = {}
    if rule is not None:
        values = {f: getattr(rule, f) for f in rules.RULE_FIELDS} | {"amount": credits_value(rule.amount)}
    else:
        values = {"mode": "fixed", "period": "monthly", "active": True}
    if request.method == "POST":
        values = request.POST.dict() | {"active": "active" in request.POST}

        def apply(data):
            saved = rules.refill_rule_set(department=dept, actor=request.user, **data)
            messages.success(request, f"Refill rule of {slug} saved: next refill "
                                      f"{format_credits(periodic.refill_amount(rule=saved))}.")

        payload = form_payload(request.POST, rules.RULE_FIELDS, checkboxes=("active",))
        errors = submit_form(RefillRuleSerializer, payload, apply,
                             credit_fields(payload, RefillRuleSerializer, ("amount",)))
        if not errors:
            return redirect("budgets:refill_rule", slug=slug)
    return render_form(request, "quotas/refill_rule.html", {
        "membership": m, "department": dept, "rule": rule, "values": values,
        "next_amount": periodic.refill_amount(rule=rule) if rule else None,
        "modes": RefillRule.MODES, "periods": RefillRule.PERIODS,
    }, errors)


@login_required
@require_POST
def refill_rule_delete(request, slug: str):
    dept = _department(request, slug, ADMIN)
    rules.refill_rule_delete(department=dept, actor=request.user)
    messages.success(request, f"Refill rule of {slug} deleted: no more automatic refills.")
    return redirect("budgets:refill_rule", slug=slug)


@login_required
@require_http_methods(["GET", "POST"])
def approval_rule(request, slug: str):
    """Department admins (of this department) and platform admins: when jobs need approval."""
    dept, m, rule = _rule_page(request, slug, CHANGE, ApprovalRule)
    errors: dict = {}
    values = ({f: getattr(rule, f) for f in rules.APPROVAL_FIELDS} | {"cost_above": credits_value(rule.cost_above)}
              if rule else {"realtime": False})
    if request.method == "POST":
        values = request.POST.dict() | {"realtime": "realtime" in request.POST}

        def apply(data):
            rules.approval_rule_set(department=dept, actor=request.user, **data)
            messages.success(request, f"Approval rule of {slug} saved.")

        payload = form_payload(request.POST, rules.APPROVAL_FIELDS, nullable=("gpus_above", "cost_above"),
                           checkboxes=("realtime",))
        errors = submit_form(ApprovalRuleSerializer, payload, apply,
                             credit_fields(payload, ApprovalRuleSerializer, ("cost_above",)))
        if not errors:
            return redirect("budgets:approval_rule", slug=slug)
    return render_form(request, "quotas/approval_rule.html", {"membership": m, "department": dept, "rule": rule,
                                                          "values": values}, errors)


@login_required
@require_http_methods(["GET", "POST"])
def allowances(request):
    """Department admins: per-user allowances of their department's members (platform admins: anyone's)."""
    m = require_role(request.user, CHANGE)
    errors: dict = {}
    values = {"period": "monthly", **request.GET.dict()}
    if request.method == "POST":
        values = request.POST.dict()
        username = values.get("user", "").strip()
        payload = form_payload(request.POST, ("limit", "period"))
        pre = credit_fields(payload, AllowanceSerializer, ("limit",))
        target = None
        if not username:
            pre["user"] = ["Choose a member."]
        else:
            target = (Membership.objects.restrict(request.user, CHANGE).select_related("user")
                      .filter(user__username=username).first())
            if target is None:
                pre["user"] = ["No such member of your department."]
            else:
                target = target.user

        def apply(data):
            a = allowance_services.allowance_set(user=target, limit=data["limit"], period=data["period"], actor=request.user)
            messages.success(request, f"Allowance of {username} set: {format_credits(a.limit)} {a.period}.")

        errors = submit_form(AllowanceSerializer, payload, apply, pre)
        if not errors:
            return redirect("budgets:allowances")
    elif "user" in values and "limit" not in values:
        # Through the one scoping rule: another department's member must not be prefilled (a leak of
        # their allowance), exactly as if they did not exist.
        current = Allowance.objects.restrict(request.user, VIEW).filter(user__username=values["user"]).first()
        if current is not None:
            values.update(limit=credits_value(current.limit), period=current.period)
    allowances = (Allowance.objects.restrict(request.user, VIEW).select_related("user", "wallet__department")
                  .order_by("wallet__department__slug", "user__username", "id"))
    rows = [(a, allowance_services.allowance_used(allowance=a)) for a in allowances]
    members = (Membership.objects.restrict(request.user, CHANGE).select_related("user", "department")
               .order_by("department__slug", "user__username"))
    return render_form(request, "quotas/allowances.html", {
        "membership": m, "rows": rows, "members": members, "values": values, "periods": Allowance.PERIODS,
    }, errors)


@login_required
@require_POST
def allowance_delete(request, username: str):
    user = Membership.objects.select_related("user").get_or_404(
        request.user, CHANGE, user__username=username, missing="No such member.",
        message="Only department admins can remove allowances.").user
    allowance_services.allowance_set(user=user, limit=None, actor=request.user)
    messages.success(request, f"Allowance of {username} removed.")
    return redirect("budgets:allowances")
