"""The fair-share statement of each department a user may see (the page ``/fair-share/`` and
``GET /api/v1/fair-share``): guaranteed, used, borrowed and lent GPUs per quota scope, the decayed history behind
its fair-share factor, and where its queued jobs stand with the factor and would stand at par.

Every figure comes from one snapshot of the world, as a cycle builds it, through the engine's own arithmetic
(``engine.fairshare``), so the statement says what the next cycle will score with. Members see their own
department's statement, platform admins every department's.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from django.utils import timezone

from engine.fairshare import FairStatement, fair_statements
from portal.models import Department
from portal.tenancy import VIEW
from scheduling.models import Job
from scheduling.services.snapshot import build_snapshot


def statements_for(*, user, now: datetime | None = None, department: str | None = None) -> list[dict]:
    """One statement per department ``user`` may see (``department``: only that one, if they may), by slug."""
    visible = Department.objects.restrict(user, VIEW).filter(archived_at__isnull=True)
    if department:
        visible = visible.filter(slug=department)
    names = dict(visible.values_list("slug", "name"))
    if not names:
        return []
    snapshot, _ = build_snapshot(now=now or timezone.now())
    found = fair_statements(snapshot)
    job_names = dict(Job.objects.filter(pk__in=[p.job_id for d in names if d in found for p in found[d].places])
                     .values_list("pk", "name"))
    return [statement_dict(found.get(slug) or _empty(slug, snapshot.policy), names[slug], job_names)
            for slug in sorted(names)]


def _empty(slug: str, policy) -> FairStatement:
    """A department the snapshot knows nothing of (no quota, no jobs, no use): at par, nothing to show."""
    return FairStatement(department=slug, scopes=(), decayed_gpu_seconds=0.0, history_share=0.0, running_gpus=0,
                         running_share=0.0, entitled_share=0.0, use_ratio=1.0, factor=1.0,
                         half_life_s=policy.usage_half_life_s, fair_share_weight=policy.fair_share_weight,
                         places=())


def statement_dict(s: FairStatement, name: str, job_names: dict[int, str]) -> dict:
    scopes = [asdict(line) for line in s.scopes]
    return {
        "department": s.department, "name": name,
        "scopes": scopes,
        "totals": {k: (round(sum(line[k] for line in scopes), 2) if k == "lent" else sum(line[k] for line in scopes))
                   for k in ("guaranteed", "used", "borrowed", "lent")},
        "history": {
            "decayed_gpu_hours": round(s.decayed_gpu_seconds / 3600, 2),
            "half_life_hours": round(s.half_life_s / 3600, 2),
            "history_share": round(s.history_share, 4),
            "running_gpus": s.running_gpus,
            "running_share": round(s.running_share, 4),
            "entitled_share": round(s.entitled_share, 4),
        },
        "use_ratio": round(s.use_ratio, 4),
        "factor": round(s.factor, 4),
        "fair_share_weight": s.fair_share_weight,
        "queue": [{"job": p.job_id, "name": job_names.get(p.job_id, ""), "flavor": p.flavor, "tier": p.tier,
                   "place": p.place, "place_at_par": p.place_at_par, "of": p.of} for p in s.places],
        "teams": [{"team": t.team, "nominal": t.nominal, "running_gpus": t.running_gpus,
                   "decayed_gpu_hours": round(t.decayed_gpu_seconds / 3600, 2), "use_ratio": t.use_ratio,
                   "factor": round(t.factor, 4)} for t in s.teams],
    }
