"""What-if for admins: replay the portal's recorded job history under the policy in force and a proposed one
(or proposed quotas) on the current cluster, and print the differences per department and tier.

    python manage.py whatif --policy proposed.json [--days 30] [--quota vision:a100-80gb:6:2] [--json]
    python manage.py whatif --export history.csv     # the history in the simulator's trace format

The proposed policy is validated exactly like PUT /api/v1/policy. Nothing is changed in the database.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

TRACE_COLUMNS = ("job_id", "submit_time_s", "duration_s", "gpus", "department", "user", "tier", "urgency",
                 "flavor", "deadline_s", "bid", "max_runtime_s", "pods")


def export_rows(*, since):
    """The history since ``since`` as simulator TraceRows (times relative to the first submission; the
    duration is what the job actually ran, its max runtime when it never ran)."""
    from scheduling.models import Job, JobState
    from scheduling.sim.trace import TraceRow

    jobs = list(Job.objects.filter(submitted_at__gte=since).exclude(state=JobState.PENDING_APPROVAL)
                .select_related("department", "flavor", "owner").order_by("submitted_at", "id"))
    if not jobs:
        return []
    t0 = jobs[0].submitted_at
    rows = []
    for j in jobs:
        if j.state == JobState.CANCELLED and j.started_at is None:
            continue  # never ran and never will: not part of the offered load
        ran = (j.finished_at - j.started_at).total_seconds() if j.started_at and j.finished_at else None
        rows.append(TraceRow(
            job_id=str(j.pk), submit_time_s=(j.submitted_at - t0).total_seconds(),
            duration_s=max(1.0, ran if ran is not None else float(j.max_runtime_s)),
            gpus=j.gpus * j.pods, department=j.department.slug, user=j.owner.get_username(), tier=j.tier,
            urgency=j.urgency, flavor=j.flavor.name,
            deadline_s=(j.deadline - t0).total_seconds() if j.deadline else None, bid=j.bid,
            max_runtime_s=float(j.max_runtime_s), pods=j.pods,
        ))
    return rows


def sim_policy(data: dict) -> dict:
    """A portal policy document (as stored) -> the simulator's policy overrides."""
    from scheduling.core.policy import policy_from_dict

    policy = policy_from_dict(data)
    out = {}
    for name in policy.__dataclass_fields__:
        if name in ("version",):
            continue
        value = getattr(policy, name)
        if name == "weights":
            value = {f"{u}/{t}": w for (u, t), w in value.items()}
        elif name == "priority_classes":
            value = dict(value)
        out[name] = value
    return out


class Command(BaseCommand):
    help = "Replay recorded history under the current and a proposed policy/quotas and print the differences."

    def add_arguments(self, parser):
        parser.add_argument("--policy", help="JSON file with a proposed policy (the API's policy document)")
        parser.add_argument("--quota", action="append", default=[], metavar="DEPT:FLAVOR:NOMINAL[:BORROW[:LEND]]",
                            help="a proposed quota (repeatable); unspecified quotas stay as they are")
        parser.add_argument("--days", type=float, default=30, help="how much history to replay (default 30)")
        parser.add_argument("--export", metavar="CSV", help="only write the history as a trace CSV")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the full comparison as JSON")

    def handle(self, *args, policy, quota, days, export, as_json: bool, **options):
        if days <= 0:
            raise CommandError("--days must be positive")
        rows = export_rows(since=timezone.now() - timedelta(days=days))
        if export:
            with open(export, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(TRACE_COLUMNS)
                for r in rows:
                    w.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in TRACE_COLUMNS])
            self.stdout.write(f"wrote {len(rows)} jobs to {export}")
            return
        if not policy and not quota:
            raise CommandError("nothing to compare: give --policy and/or --quota (or --export)")
        if not rows:
            raise CommandError(f"no jobs in the last {days:g} days to replay")
        current_doc, proposed_doc = self._policies(policy)
        quotas = self._quotas()
        proposed_quotas = self._apply_quota_changes(quotas, quota)
        from scheduling.sim.whatif import compare, format_diff

        result = compare(rows, node_groups=self._node_groups(), quotas=quotas, proposed_quotas=proposed_quotas,
                         current_policy=sim_policy(current_doc), proposed_policy=sim_policy(proposed_doc),
                         members=self._members())
        if as_json:
            self.stdout.write(json.dumps(result, indent=2, sort_keys=True, default=str))
        else:
            self.stdout.write(f"replayed {len(rows)} jobs of the last {days:g} days on the current cluster\n")
            self.stdout.write(format_diff(result))

    def _policies(self, path):
        from scheduling.core.policy import PolicyError, policy_from_dict
        from scheduling.services.policy import current_policy, policy_as_dict

        current_doc = policy_as_dict(current_policy()[0])
        if not path:
            return current_doc, current_doc
        try:
            proposed = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the proposed policy {path}: {exc}")
        if not isinstance(proposed, dict):
            raise CommandError("the proposed policy must be a JSON object")
        try:
            policy_from_dict(proposed)
        except PolicyError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items())
            raise CommandError(f"the proposed policy is invalid: {problems}")
        return current_doc, proposed

    def _quotas(self):
        from quotas.models import Quota

        out: dict = {}
        for q in Quota.objects.select_related("department", "flavor"):
            out.setdefault(q.department.slug, {})[q.flavor.name] = {
                "nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit}
        return out

    def _apply_quota_changes(self, quotas, changes):
        from quotas.models import Flavor

        proposed = {d: {f: dict(v) for f, v in per.items()} for d, per in quotas.items()}
        flavors = set(Flavor.objects.values_list("name", flat=True))
        for spec in changes:
            parts = spec.split(":")
            if len(parts) < 3 or len(parts) > 5:
                raise CommandError(f"--quota {spec!r}: use DEPT:FLAVOR:NOMINAL[:BORROW[:LEND]]")
            dept, flavor, *numbers = parts
            if flavor not in flavors:
                raise CommandError(f"--quota {spec!r}: unknown flavor {flavor!r}")
            try:
                values = [None if n in ("", "none", "-") else int(n) for n in numbers]
            except ValueError:
                raise CommandError(f"--quota {spec!r}: quotas are whole numbers of GPUs")
            if any(v is not None and v < 0 for v in values):
                raise CommandError(f"--quota {spec!r}: quotas cannot be negative")
            entry = proposed.setdefault(dept, {}).setdefault(flavor, {"nominal": 0})
            for key, value in zip(("nominal", "borrowing_limit", "lending_limit"), values, strict=False):
                entry[key] = value if key != "nominal" else (value or 0)
        return proposed

    def _node_groups(self):
        from scheduling.models import Node

        groups = Counter(Node.objects.filter(schedulable=True).values_list("flavor__name", "gpus"))
        if not groups:
            raise CommandError("no schedulable nodes to replay on")
        return [{"name": f"{flavor}-{gpus}", "count": n, "gpus_per_node": gpus, "flavor": flavor}
                for (flavor, gpus), n in sorted(groups.items())]

    def _members(self):
        from portal.models import Membership

        out: dict = {}
        for m in Membership.objects.select_related("department", "user"):
            out.setdefault(m.department.slug, {})[m.user.get_username()] = m.user_tier
        return out
