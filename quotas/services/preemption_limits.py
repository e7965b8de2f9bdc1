"""Preemptibility apart from the tier: what a submission may ask, under the lab's ``PreemptionLimit`` rows.

Invariants:

* A job of a preemptible tier (elastic, backfill) is non-preemptible only when asked for and allowed by its
  department's limit of that tier, else the lab-wide one (no limit: not allowed): the limit says which user
  tiers may ask, for how long at most, and what surcharge on the base price the job pays.
* A job of a non-preemptible tier (realtime) may always ask to be preemptible; a session is preemptible,
  without asking, when its department's (else the lab's) realtime limit says sessions are, and may then not
  ask otherwise.
* A refusal is a field error on ``preemptible`` (a 400 that says which limit and why); nothing is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from engine import tiers
from portal.audit import audit
from quotas.models import DEFAULT_MAX_NOTICE_S, PreemptionLimit
from quotas.services.base import field_error


@dataclass(frozen=True)
class PreemptionTerms:
    preemptible: bool | None  # the job's own choice as stored (None: its tier's)
    surcharge_pct: int = 0
    notice_s: int = 0  # the notice before preemption it gets (0: none)


def notice_bound(limit: PreemptionLimit | None) -> int:
    """The longest notice a job under ``limit`` may declare (no limit: the lab's default)."""
    return limit.max_notice_s if limit is not None else DEFAULT_MAX_NOTICE_S


def limit_for(*, department_id: int | None, tier: str, seen: dict | None = None) -> PreemptionLimit | None:
    """The department's limit of the tier, else the lab-wide one (None: neither is set). ``seen`` keeps what
    was read for the length of one submission, so a batch or an array reads its department's limits once."""
    if seen is not None:
        if department_id not in seen:  # every tier's limits at once: a batch mixes tiers
            seen[department_id] = {(row.department_id, row.tier): row for row in PreemptionLimit.objects.filter(
                Q(department_id=department_id) | Q(department__isnull=True))}
        rows = seen[department_id]
        return rows.get((department_id, tier)) or rows.get((None, tier))
    rows = {row.department_id: row for row in PreemptionLimit.objects.filter(
        Q(department_id=department_id) | Q(department__isnull=True), tier=tier)}
    return rows.get(department_id) or rows.get(None)


def preemption_terms(*, department_id: int, tier: str, user_tier: str, session: bool, asked: bool | None,
                     max_runtime_s: int, notice_s: int = 0, field: str = "preemptible",
                     notice_field: str = "notice_s", seen: dict | None = None) -> PreemptionTerms:
    """The stored choice, surcharge and notice of a submission that ``asked`` for preemptibility (None: did not)
    and declared ``notice_s`` of notice, or a field error on ``field`` (``notice_field``) when its department's
    limits refuse it. A session the lab made preemptible gets the limit's longest notice without asking."""
    limit = limit_for(department_id=department_id, tier=tier, seen=seen)
    bound = notice_bound(limit)
    if notice_s > bound:
        raise field_error(notice_field, f"A {tier} job of your department may ask for at most {bound} s of notice "
                                        f"before preemption; this one asks for {notice_s} s.", "max_value")
    terms = _terms(limit=limit, tier=tier, user_tier=user_tier, session=session, asked=asked,
                   max_runtime_s=max_runtime_s, field=field)
    if session and terms.preemptible and not notice_s:
        notice_s = bound  # an interactive user is told before their session goes, as long as the lab allows
    return PreemptionTerms(terms.preemptible, terms.surcharge_pct, notice_s)


def _terms(*, limit: PreemptionLimit | None, tier: str, user_tier: str, session: bool, asked: bool | None,
           max_runtime_s: int, field: str) -> PreemptionTerms:
    protected_tier = not tiers.preemptible(tier)
    if protected_tier:
        if session and limit is not None and limit.sessions_preemptible:
            if asked is False:
                raise field_error(field, "Your lab runs interactive sessions preemptible: a session may not ask "
                                         "not to be.", "not_allowed")
            return PreemptionTerms(True)
        return PreemptionTerms(True if asked else None)
    if asked is not False:
        return PreemptionTerms(None)  # (asking for what the tier is anyway stores nothing)
    if limit is None or not limit.non_preemptible:
        raise field_error(field, f"Your department may not run non-preemptible {tier} jobs.", "not_allowed")
    if limit.user_tiers and user_tier not in limit.user_tiers:
        raise field_error(field, f"Only {', '.join(limit.user_tiers)} members may run non-preemptible {tier} jobs "
                                 f"(you are {user_tier}).", "not_allowed")
    if limit.max_runtime_s is not None and max_runtime_s > limit.max_runtime_s:
        raise field_error(field, f"A non-preemptible {tier} job may run at most {limit.max_runtime_s} s; this one "
                                 f"asks for {max_runtime_s} s (max_runtime_s).", "max_value")
    return PreemptionTerms(False, limit.surcharge_pct)


LIMIT_FIELDS = ("non_preemptible", "user_tiers", "max_runtime_s", "surcharge_pct", "sessions_preemptible",
                "max_notice_s")


def limit_defaults() -> dict:
    """A new row's values: what a field left out of the lab file means."""
    return {f: PreemptionLimit._meta.get_field(f).get_default() for f in LIMIT_FIELDS}


def limit_values(limit: PreemptionLimit | None) -> dict | None:
    return None if limit is None else {f: getattr(limit, f) for f in LIMIT_FIELDS}


def preemption_limit_set(*, department, tier: str, actor, **values) -> PreemptionLimit:
    """Create or change the limit of ``tier`` for ``department`` (None: the lab-wide one), audited with old and
    new values. A field left out keeps its value (a new row: the model's default)."""
    unknown = set(values) - set(LIMIT_FIELDS)
    if unknown:
        raise TypeError(f"unknown preemption limit field(s): {', '.join(sorted(unknown))}")
    with transaction.atomic():
        limit = PreemptionLimit.objects.select_for_update(of=("self",)).filter(department=department, tier=tier).first()
        old = limit_values(limit)
        if limit is None:
            limit = PreemptionLimit(department=department, tier=tier)
        for f, v in values.items():
            setattr(limit, f, list(v) if f == "user_tiers" else v)
        limit.updated_at = timezone.now()
        limit.save()
        new = limit_values(limit)
        if new != old:
            audit(actor=actor, action="preemption_limit.set", obj=limit, department=department, old=old,
                  new={"tier": tier, **new})
    return limit


def preemption_limit_delete(*, department, tier: str, actor, comment: str = "") -> bool:
    """Remove the limit of ``tier`` for ``department`` (None: the lab-wide one); whether there was one. Without
    it the department's jobs fall back to the lab-wide limit, and without that to the tier's own rule."""
    with transaction.atomic():
        limit = PreemptionLimit.objects.select_for_update(of=("self",)).filter(department=department, tier=tier).first()
        if limit is None:
            return False
        audit(actor=actor, action="preemption_limit.delete", obj=limit, department=department,
              old={"tier": tier, **limit_values(limit)}, comment=comment)
        limit.delete()
    return True
