"""What admins configure, audited with old and new values: quotas, refill rules and approval rules.

Invariants: a department has at most one rule row of each kind; every change and deletion writes an
``AuditEntry`` in the same transaction; a lending limit never exceeds the nominal quota; the nominal quotas of
a flavor fit its installed GPUs (a per-cluster quota's: that cluster's GPUs) unless oversubscription was asked
for (and then the audit entry says so).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from portal.audit import audit
from portal.errors import NotFound, ValidationFailed
from portal.models import Department
from quotas import ports
from quotas.models import ApprovalRule, Flavor, Quota, QuotaResource, RefillRule, Wallet
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


def flavor_capacity(flavor, cluster=None) -> int:
    """The GPUs of ``flavor`` installed (schedulable nodes) in every cluster, or in ``cluster`` only: what the
    global nominal quotas, or that cluster's per-cluster ones, share."""
    # The nodes are scheduling's: it counts them (quotas.ports), quotas never reads a node.
    return ports.facts().installed_gpus(flavor_id=flavor.pk, cluster_id=None if cluster is None else cluster.pk)


def quota_limit_errors(*, nominal, borrowing, lending) -> dict[str, list[dict]]:
    """The rules a quota's numbers keep on their own (no capacity, no database): each at least 0, and the
    lending limit within the nominal quota. Field errors as the API answers them; {} when they hold. The quota
    services, a quota request and the lab file all check through this."""
    errors: dict[str, list[dict]] = {}

    def err(field, message, code):
        errors.setdefault(field, []).append({"code": code, "message": message})

    if nominal is None or nominal < 0:
        err("nominal", "The nominal quota must be 0 or more.", "min_value")
    if borrowing is not None and borrowing < 0:
        err("borrowing_limit", "The borrowing limit must be 0 or more (empty: unlimited).", "min_value")
    if lending is not None and lending < 0:
        err("lending_limit", "The lending limit must be 0 or more (empty: all of the nominal quota).", "min_value")
    if lending is not None and nominal is not None and lending > nominal:
        err("lending_limit", "The lending limit cannot exceed the nominal quota.", "exceeds_nominal")
    return errors


def nominal_room(*, flavor, cluster=None, department=None) -> tuple[int, int]:
    """(installed GPUs, the nominal quotas other departments hold) of ``flavor`` in one scope: every cluster
    (``cluster`` None, the global quotas) or one cluster (its per-cluster quotas). What is left for
    ``department``'s nominal quota there is the first less the second (less than 0 when already
    oversubscribed)."""
    others = Quota.objects.filter(flavor=flavor, cluster=cluster, resource=QuotaResource.GPUS)
    if department is not None:
        others = others.exclude(department=department)
    return flavor_capacity(flavor, cluster), others.aggregate(n=Sum("nominal"))["n"] or 0


def over_capacity_message(*, flavor, cluster, total: int, capacity: int) -> str:
    where = "the clusters have" if cluster is None else f"cluster {cluster.name} has"
    what = flavor.name if cluster is None else f"{flavor.name} on {cluster.name}"
    return (f"The nominal quotas of {what} would add up to {total} GPUs, but {where} "
            f"{capacity}: {total - capacity} GPU(s) oversubscribed.")


def _check_quota(*, department: Department, flavor, nominal: int, borrowing, lending, oversubscribe: bool,
                 cluster=None, exclude_pk=None, resource: str = QuotaResource.GPUS) -> list[str]:
    """The quota rules: borrowing limit >= 0, lending limit <= nominal, and the nominal quotas of a flavor
    within its installed GPUs (a per-cluster quota's: with the other per-cluster quotas of that cluster, within
    that cluster's GPUs), unless ``oversubscribe`` (then a warning is returned). Raises every field error at
    once."""
    errors = quota_limit_errors(nominal=nominal, borrowing=borrowing, lending=lending)

    def err(field, message, code):
        errors.setdefault(field, []).append({"code": code, "message": message})

    warnings: list[str] = []
    if not errors and resource == QuotaResource.GPUS:  # (cores and GiB of a CPU pool: not checked against nodes)
        # Each scope shares its own GPUs: global quotas all clusters', a cluster's quotas that cluster's.
        same_scope = Quota.objects.filter(flavor=flavor, cluster=cluster, resource=resource).exclude(pk=exclude_pk)
        others = same_scope.aggregate(n=Sum("nominal"))["n"] or 0
        capacity = flavor_capacity(flavor, cluster)
        total = others + nominal
        if total > capacity:
            message = over_capacity_message(flavor=flavor, cluster=cluster, total=total, capacity=capacity)
            if oversubscribe:
                warnings.append(message + " Accepted because oversubscribe was asked for: guarantees may not "
                                          "all be met at once.")
            else:
                err("nominal", message + " Lower it, add capacity, or confirm with oversubscribe.",
                    "over_capacity")
    if errors:
        raise ValidationFailed(fields=errors)
    return warnings


def _lock_flavor(flavor_id: int) -> None:
    """Serialise the quota writes of one flavor: each checks the sum of the flavor's other quotas against its
    GPUs, so two concurrent writes could each pass alone and oversubscribe together (or both find no quota and
    both insert one). Taken first in every quota write, before any quota row, so the lock order is fixed."""
    Flavor.objects.select_for_update().filter(pk=flavor_id).values_list("pk", flat=True).first()


def _audited(quota: Quota, values: dict) -> dict:
    """What an audit entry records of a quota: its values, plus the cluster of a per-cluster quota."""
    return {**values, **({"cluster": quota.cluster.name} if quota.cluster_id else {})}


def quota_set(*, quota: Quota, actor, oversubscribe: bool = False, comment: str = "", **values) -> Quota:
    """Change a quota (platform admins, or a platform admin approving a department's request), validated
    and audited with old and new values and the reason. ``quota.warnings`` lists what was accepted
    knowingly (oversubscription). A quota's department, flavor and cluster do not change."""
    with transaction.atomic():
        _lock_flavor(quota.flavor_id)
        # Lock the quota row only: its cluster is an outer join, which PostgreSQL cannot lock.
        quota = Quota.objects.select_for_update(of=("self",)).select_related("department", "flavor", "cluster").get(
            pk=quota.pk)
        new = {f: values.get(f, getattr(quota, f)) for f in QUOTA_FIELDS}
        warnings = _check_quota(department=quota.department, flavor=quota.flavor, nominal=new["nominal"],
                                borrowing=new["borrowing_limit"], lending=new["lending_limit"],
                                oversubscribe=oversubscribe, cluster=quota.cluster, exclude_pk=quota.pk,
                                resource=quota.resource)
        old = {f: getattr(quota, f) for f in QUOTA_FIELDS}
        for f in QUOTA_FIELDS:
            setattr(quota, f, new[f])
        quota.save(update_fields=list(QUOTA_FIELDS))
        if old != new:
            audit(actor=actor, action="quota.set", obj=quota, department=quota.department,
                  old=_audited(quota, old),
                  new=_audited(quota, {**new, **({"oversubscribed": True} if warnings else {})}),
                  comment=" ".join([comment, *warnings]).strip())
    quota.warnings = warnings
    return quota


def resource_mismatch(flavor):
    """The 400 on ``resource`` of a quota (or a request for one) that counts what its flavor has not."""
    return field_error("resource", f"{flavor.name} is " + ("a CPU pool: its quotas count cpu or memory."
                                                          if flavor.is_cpu else "a GPU flavor: its quotas count gpus."),
                       "invalid")


def quota_create(*, department: Department, flavor, actor, nominal: int = 0, borrowing_limit=None,
                 lending_limit=None, oversubscribe: bool = False, comment: str = "", cluster=None,
                 resource: str = QuotaResource.GPUS) -> Quota:
    """Give a department a quota of a flavor it has none of (validated and audited like a change): a global
    one (``cluster`` None) or one on ``cluster`` only; of GPUs, or of a CPU pool's cores or GiB (``resource``)."""
    if (resource == QuotaResource.GPUS) == flavor.is_cpu:
        raise resource_mismatch(flavor)
    if department.is_archived:
        raise field_error("department", f"{department.slug} is archived: it takes no new quotas.", "archived")
    where = "" if cluster is None else f" on {cluster.name}"
    exists = field_error("flavor", f"{department.slug} already has a quota of {flavor.name}{where}; change it "
                                   "instead.", "unique")
    with transaction.atomic():
        _lock_flavor(flavor.pk)
        if Quota.objects.filter(department=department, flavor=flavor, cluster=cluster, resource=resource).exists():
            raise exists
        warnings = _check_quota(department=department, flavor=flavor, nominal=nominal, borrowing=borrowing_limit,
                                lending=lending_limit, oversubscribe=oversubscribe, cluster=cluster, resource=resource)
        try:
            with transaction.atomic():
                quota = Quota.objects.create(department=department, flavor=flavor, cluster=cluster, resource=resource,
                                             nominal=nominal, borrowing_limit=borrowing_limit,
                                             lending_limit=lending_limit)
        except IntegrityError:  # (only where the flavor lock is a no-op, as on SQLite)
            raise exists from None
        new = {f: getattr(quota, f) for f in QUOTA_FIELDS}
        audit(actor=actor, action="quota.create", obj=quota, department=department,
              new=_audited(quota, {**new, **({"oversubscribed": True} if warnings else {})}),
              comment=" ".join([comment, *warnings]).strip())
    quota.warnings = warnings
    return quota


def quota_delete(*, quota: Quota, actor, comment: str = "") -> None:
    """Remove a department's quota of a flavor (it keeps only what it can borrow), audited."""
    with transaction.atomic():
        audit(actor=actor, action="quota.delete", obj=quota, department=quota.department,
              old=_audited(quota, {f: getattr(quota, f) for f in QUOTA_FIELDS}), comment=comment)
        quota.delete()
