"""The append-only audit record of who changed what: one helper for every app's services.

Invariant: the ``AuditEntry`` is written in the caller's transaction, so the record and the change commit or
roll back together.
"""

from __future__ import annotations

from portal.models import AuditEntry


def audit(*, actor, action: str, obj, department=None, old=None, new=None, comment: str = "") -> AuditEntry:
    """Record who changed what, when, from which value to which (quotas, budgets, prices, approvals)."""
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        department=department,
        old=old,
        new=new,
        comment=comment[:2000],
    )
