"""The policy tuner in the portal: on a schedule (``scheduling.tuning.run``, every ``POLICY_TUNER_INTERVAL_S``)
and on an admin's demand, measure the last week against the lab's targets, search policy changes on the
what-if replay of that week (``simulator.tuner``, through ``simulator.whatif.replay`` on the history
``scheduling.services.whatif`` exports) and keep the result as a ``PolicyProposal``.

Nothing changes the policy without an admin's click (``apply_proposal``, which saves a policy version through
``policy_update``, audited as every edit), unless the lab turned automatic application on: then a proposal
within its bounds (every change within ``automatic.max_change``, only targets of ``automatic.targets``
improved, no target costs) is applied at once, by nobody, and says so. Each run, application and dismissal is
audited.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.errors import Conflict, NotFound, ValidationFailed
from portal.models import AuditEntry
from scheduling.models import PolicyProposal, TunerSettings
from scheduling.services import whatif
from scheduling.services.policy import current_policy, policy_update
from simulator import tuner
from simulator.whatif import overrides_of, replay

DEFAULT_TIME_LIMIT_S = 600.0


def time_limit_s() -> float:
    return float(getattr(settings, "POLICY_TUNER_TIME_LIMIT_S", DEFAULT_TIME_LIMIT_S))


# ------------------------------------------------------------------------------------------ the configuration


def tuner_config() -> tuner.TunerConfig:
    """The lab's tuner configuration (the defaults until an admin saves one)."""
    row = TunerSettings.objects.order_by("pk").first()
    return tuner.config_from_dict(row.config if row else {})


def tuner_config_update(*, user, data) -> tuner.TunerConfig:
    """Validate ``data`` (a whole configuration document; missing keys take the defaults) and store it,
    audited; a ValidationFailed names each bad field."""
    try:
        config = tuner.config_from_dict(data)
    except tuner.TunerConfigError as exc:
        fields = {k: [{"code": "invalid", "message": m} for m in v] for k, v in exc.errors.items()}
        raise ValidationFailed("The tuner configuration is invalid.", fields=fields)
    old = tuner.config_to_dict(tuner_config())
    new = tuner.config_to_dict(config)
    with transaction.atomic():
        row = TunerSettings.objects.select_for_update().order_by("pk").first() or TunerSettings()
        row.config, row.updated_at, row.updated_by = new, timezone.now(), user
        row.save()
        AuditEntry.objects.create(actor=user, action="policy.tuner_config", object_type="tuner", object_id="1",
                                  old=old, new=new)
    return config


# ------------------------------------------------------------------------------------------ a run


def _measured(since, names: list[str]) -> dict:
    """Each target's figure as the week happened (first waits of the jobs submitted since ``since``)."""
    jobs = (whatif._history(since).select_related("department")
            .values_list("tier", "urgency", "department__slug", "submitted_at", "started_at"))
    waits = [(t, u, d, (s - sub).total_seconds() if s else None) for t, u, d, sub, s in jobs]
    depts = [n.split(":", 1)[1] for n in names if n.startswith("dept:")]
    return tuner.figures(tuner.summary_from_waits(waits), depts)


def run_tuner(*, trigger: str = PolicyProposal.Trigger.SCHEDULE, user=None) -> PolicyProposal:
    """Run the tuner over the last ``search.days`` of history and keep its result (an older proposal still
    waiting is superseded). A replay that cannot run is kept as a failed run with its reason."""
    config = tuner_config()
    current_doc, version = whatif.current_policy_doc()
    since = timezone.now() - timedelta(days=config.days)
    base = {"trigger": trigger, "requested_by": user, "base_version": version,
            "config": tuner.config_to_dict(config), "days": config.days}
    rows = whatif.export_rows(since=since, limit=whatif.max_jobs())
    if not rows:
        return _save(PolicyProposal(status=PolicyProposal.Status.NONE, **base,
                                    reason=f"No jobs in the last {config.days:g} days to replay."))
    limit = time_limit_s()
    deadline = time.monotonic() + limit
    c0 = time.process_time()
    try:
        groups = whatif.node_groups()
        quotas = whatif._with_cpu(whatif.current_quotas(), whatif.cpu_quotas())
        members, clusters = whatif.member_tiers(), whatif.cluster_infos()

        def evaluate(doc: dict) -> dict:
            meter = tuner.IdleMeter(whatif._Bounded(deadline, limit))
            summary = replay(rows, node_groups=groups, quotas=quotas, policy=overrides_of(doc), decide=meter,
                             members=members, clusters=clusters)
            summary["idle_while_waiting"] = meter.share
            return summary

        result = tuner.tune(evaluate, current_doc, config)
    except whatif.WhatIfError as exc:
        return _save(PolicyProposal(status=PolicyProposal.Status.FAILED, **base, jobs=len(rows),
                                    reason=exc.message, cpu_s=time.process_time() - c0))
    proposal = PolicyProposal(
        status=PolicyProposal.Status.PROPOSED if result.proposal else PolicyProposal.Status.NONE, **base,
        jobs=len(rows), measured=_measured(since, list(result.current)), current=result.current,
        limits=result.limits, proposal=result.proposal, predicted=result.predicted, diff=result.diff,
        improves=result.improves, costs=result.costs, reason=result.reason, replays=result.replays,
        cpu_s=time.process_time() - c0)
    _save(proposal)
    automatic, _ = tuner.auto_applicable(result, current_doc, config)
    if automatic:
        apply_proposal(proposal.pk, user=None, automatic=True)
        proposal.refresh_from_db()
    return proposal


def _save(proposal: PolicyProposal) -> PolicyProposal:
    with transaction.atomic():
        if proposal.status == PolicyProposal.Status.PROPOSED:
            PolicyProposal.objects.filter(status=PolicyProposal.Status.PROPOSED).update(
                status=PolicyProposal.Status.SUPERSEDED)
        proposal.save()
        AuditEntry.objects.create(
            actor=proposal.requested_by, action="policy.proposal", object_type="policy_proposal",
            object_id=str(proposal.pk), new={"status": proposal.status, "base_version": proposal.base_version,
                                             "diff": proposal.diff, "improves": proposal.improves,
                                             "costs": proposal.costs},
            comment=proposal.reason or f"{proposal.trigger} run over {proposal.jobs} jobs")
    return proposal


# ------------------------------------------------------------------------------------------ the decision


def _open(pk: int) -> PolicyProposal:
    p = PolicyProposal.objects.select_for_update().filter(pk=pk).first()
    if p is None:
        raise NotFound("No such policy proposal.")
    if p.status != PolicyProposal.Status.PROPOSED:
        raise Conflict(f"This proposal is {p.get_status_display().lower()}: only a waiting proposal can be "
                       "applied or dismissed.")
    return p


def apply_proposal(pk: int, *, user, automatic: bool = False) -> PolicyProposal:
    """Save the proposal as the next policy version (``policy_update``: validated, versioned, audited) and mark
    it applied. A proposal made on another version than the one in force is superseded instead (409): its
    replay compared against a policy that is no longer the current one."""
    with transaction.atomic():
        p = _open(pk)
        _, version = current_policy()
        if version != p.base_version:
            p.status = PolicyProposal.Status.SUPERSEDED
            p.save(update_fields=["status"])
            stale = True
        else:
            stale = False
            how = "applied automatically within the lab's bounds" if automatic else "applied"
            row = policy_update(user=user, data=p.proposal, comment=_comment(p, how))
            p.status, p.applied_version, p.auto_applied = PolicyProposal.Status.APPLIED, row.version, automatic
            p.decided_by, p.decided_at = user, timezone.now()
            p.save(update_fields=["status", "applied_version", "auto_applied", "decided_by", "decided_at"])
            AuditEntry.objects.create(actor=user, action="policy.proposal.apply", object_type="policy_proposal",
                                      object_id=str(p.pk), old={"version": p.base_version},
                                      new={"version": row.version, "diff": p.diff},
                                      comment="automatic" if automatic else "")
    if stale:
        raise Conflict("The policy changed since this proposal was made; run the tuner again.")
    return p


def dismiss_proposal(pk: int, *, user, comment: str = "") -> PolicyProposal:
    with transaction.atomic():
        p = _open(pk)
        p.status, p.decided_by, p.decided_at = PolicyProposal.Status.DISMISSED, user, timezone.now()
        p.save(update_fields=["status", "decided_by", "decided_at"])
        AuditEntry.objects.create(actor=user, action="policy.proposal.dismiss", object_type="policy_proposal",
                                  object_id=str(p.pk), comment=comment)
    return p


def _comment(p: PolicyProposal, how: str) -> str:
    text = f"Tuner proposal {p.pk} {how}: improves {', '.join(p.improves) or 'nothing'}"
    if p.costs:
        text += f"; costs {', '.join(p.costs)}"
    return text[:300]


def latest_proposal() -> PolicyProposal | None:
    return PolicyProposal.objects.select_related("requested_by", "decided_by").first()
