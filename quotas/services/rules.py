"""What admins configure, audited with old and new values: quotas, refill rules and approval rules.

Invariants: a department has at most one rule row of each kind; every change and deletion writes an
``AuditEntry`` in the same transaction; a lending limit never exceeds the nominal quota.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import NotFound
from portal.models import Department
from quotas.models import ApprovalRule, Quota, RefillRule, Wallet
from quotas.services.base import field_error
from quotas.services.wallets import wallet_create

RULE_FIELDS = ("mode", "amount", "period", "active")


def _rule_set(model, fields, action: str, *, department: Department, actor, values: dict):
    """Create or update a department's one rule row of ``model``, audited with old and new values."""
    with transaction.atomic():
        rule = model.objects.select_for_update().filter(department=department).first()
        old = None if rule is None else {f: getattr(rule, f) for f in fields}
        if rule is None:
            rule = model(department=department)
        for f in fields:
            if f in values:
                setattr(rule, f, values[f])
        rule.updated_at = timezone.now()
        rule.save()
        audit(actor=actor, action=action, obj=rule, department=department, old=old,
              new={f: getattr(rule, f) for f in fields})
    return rule


def refill_rule_set(*, department: Department, actor, **values) -> RefillRule:
    rule = _rule_set(RefillRule, RULE_FIELDS, "refill_rule.set", department=department, actor=actor, values=values)
    if not Wallet.objects.filter(department=department).exists():
        wallet_create(department=department, actor=actor)
    return rule


def refill_rule_delete(*, department: Department, actor) -> None:
    """Remove the department's refill rule (audited with its last values). NotFound when it has none."""
    with transaction.atomic():
        rule = RefillRule.objects.select_for_update().filter(department=department).first()
        if rule is None:
            raise NotFound("No refill rule.")
        audit(actor=actor, action="refill_rule.delete", obj=rule, department=department,
              old={f: getattr(rule, f) for f in RULE_FIELDS})
        rule.delete()


APPROVAL_FIELDS = ("gpus_above", "cost_above", "realtime")


def approval_rule_set(*, department: Department, actor, **values) -> ApprovalRule:
    return _rule_set(ApprovalRule, APPROVAL_FIELDS, "approval_rule.set", department=department, actor=actor,
                     values=values)


QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")


def quota_set(*, quota: Quota, actor, **values) -> Quota:
    """Change a quota (platform admins; audited with old and new values)."""
    nominal = values.get("nominal", quota.nominal)
    lending = values.get("lending_limit", quota.lending_limit)
    if lending is not None and lending > nominal:
        raise field_error("lending_limit", "The lending limit cannot exceed the nominal quota.", "exceeds_nominal")
    with transaction.atomic():
        old = {f: getattr(quota, f) for f in QUOTA_FIELDS}
        for f in QUOTA_FIELDS:
            if f in values:
                setattr(quota, f, values[f])
        quota.save(update_fields=list(QUOTA_FIELDS))
        audit(actor=actor, action="quota.set", obj=quota, department=quota.department, old=old,
              new={f: getattr(quota, f) for f in QUOTA_FIELDS})
    return quota
