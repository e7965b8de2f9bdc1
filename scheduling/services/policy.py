"""The scheduling policy in force: the highest PolicyVersion, read at the start of every cycle (so an edit
takes effect on the next cycle, without a restart)."""

from __future__ import annotations

import dataclasses

from django.db import IntegrityError, transaction
from django.db.models import Max

from engine.policy import PolicyError, policy_from_dict, policy_to_dict
from engine.types import Policy
from portal.errors import Conflict, ValidationFailed
from portal.models import AuditEntry
from scheduling.models import PolicyVersion
from scheduling.services import run_cache

# A saved version is the whole document of the day it was saved, and an upgrade must not change what it does.
# A field added since is missing from it; where the field's default is not the behaviour the portal had before
# the field existed, the version takes that behaviour (the priority band did not exist: one band; a job that lost
# its node waited in its normal place: no expedited requeues).
BEFORE_IT_EXISTED: dict[str, object] = {"priority_band_weight": 0.0, "expedited_requeues": 0}


def current_policy() -> tuple[Policy, int]:
    """The policy in force and its version (0 = built-in defaults, never edited); read once per pod-worker task
    run (``run_cache``), every time elsewhere."""
    return run_cache.cached("policy", _read_policy)


def _read_policy() -> tuple[Policy, int]:
    row = PolicyVersion.objects.order_by("-version").first()
    if row is None:
        return Policy(), 0
    data = {**BEFORE_IT_EXISTED, **row.data}
    return dataclasses.replace(policy_from_dict(data), version=row.version), row.version


def policy_as_dict(policy: Policy) -> dict:
    return policy_to_dict(policy)


def policy_update(*, user, data: dict, comment: str = "") -> PolicyVersion:
    """Validate ``data`` (a whole policy document) and store it as the next version, audited."""
    try:
        policy = policy_from_dict(data)
    except PolicyError as exc:
        fields = {k: [{"code": "invalid", "message": m} for m in v] for k, v in exc.errors.items()}
        raise ValidationFailed("The policy is invalid.", fields=fields)
    old, _ = current_policy()
    latest = PolicyVersion.objects.aggregate(v=Max("version"))["v"] or 0
    try:
        with transaction.atomic():
            row = PolicyVersion.objects.create(
                version=latest + 1, data=policy_to_dict(policy), author=user, comment=comment
            )
            _audit(user=user, old=old, row=row, comment=comment)
    except IntegrityError:  # unique version: another admin saved first; they must look again
        raise Conflict("Another policy version was saved meanwhile; reload and apply your change again.")
    return row


def _audit(*, user, old: Policy, row: PolicyVersion, comment: str) -> None:
    AuditEntry.objects.create(
        actor=user,
        action="policy.update",
        object_type="policy",
        object_id=str(row.version),
        old=policy_as_dict(old),
        new=row.data,
        comment=comment,
    )
