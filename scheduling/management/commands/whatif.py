"""What-if for admins: replay the portal's recorded job history under the policy in force and a proposed one
(or proposed quotas) on the current cluster, and print the differences per department and tier.

    python manage.py whatif --policy proposed.json [--days 30] [--quota vision:a100-80gb:6:2] [--json]
    python manage.py whatif --export history.csv     # the history in the simulator's trace format

The proposed policy is validated exactly like PUT /api/v1/policy. Nothing is changed in the database. The
export, validation and replay are ``scheduling.services.whatif`` (shared with the dashboard's What-if page);
like the page, a replay takes at most WHATIF_MAX_JOBS jobs (the most recent) unless --max-jobs says otherwise.
"""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from csvsafe import safe_row
from scheduling.services.whatif import (
    QUOTA_FIELDS,
    TRACE_COLUMNS,
    WhatIfError,
    current_quotas,
    export_rows,
    quota_change,
    run_whatif,
)
from simulator.trace import column_value
from simulator.whatif import format_diff


class Command(BaseCommand):
    help = "Replay recorded history under the current and a proposed policy/quotas and print the differences."

    def add_arguments(self, parser):
        parser.add_argument("--policy", help="JSON file with a proposed policy (the API's policy document)")
        parser.add_argument("--quota", action="append", default=[], metavar="DEPT:FLAVOR:NOMINAL[:BORROW[:LEND]]",
                            help="a proposed quota (repeatable); unspecified quotas stay as they are")
        parser.add_argument("--days", type=float, default=30, help="how much history to replay (default 30)")
        parser.add_argument("--max-jobs", type=int, default=None,
                            help="replay at most this many of the most recent jobs (default WHATIF_MAX_JOBS)")
        parser.add_argument("--time-limit", type=float, default=None,
                            help="give up after this many seconds (default WHATIF_TIME_LIMIT_S)")
        parser.add_argument("--export", metavar="CSV", help="only write the history as a trace CSV")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the full comparison as JSON")

    def handle(self, *args, policy, quota, days, max_jobs, time_limit, export, as_json: bool, **options):
        if days <= 0:
            raise CommandError("--days must be positive")
        if export:
            rows = export_rows(since=timezone.now() - timedelta(days=days), limit=max_jobs)
            with open(export, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(TRACE_COLUMNS)
                for r in rows:  # job and user names are users' own text: neutralised for spreadsheets
                    w.writerow(safe_row("" if column_value(r, c) is None else column_value(r, c) for c in TRACE_COLUMNS))
            self.stdout.write(f"wrote {len(rows)} jobs to {export}")
            return
        if not policy and not quota:
            raise CommandError("nothing to compare: give --policy and/or --quota (or --export)")
        try:
            now = current_quotas()
            changes = [self._quota(spec, now) for spec in quota]
            res = run_whatif(days=days, proposed_policy=self._policy(policy) if policy else None,
                             quota_changes=changes, limit=max_jobs, time_limit=time_limit)
        except WhatIfError as exc:
            raise CommandError(exc.message)
        if as_json:
            self.stdout.write(json.dumps(res.result, indent=2, sort_keys=True, default=str))
            return
        capped = f" (the most recent {res.jobs} of {res.total}: capped)" if res.capped else ""
        self.stdout.write(f"replayed {res.jobs} jobs of the last {days:g} days{capped} on the current cluster\n")
        self.stdout.write(format_diff(res.result))

    def _policy(self, path) -> dict:
        try:
            proposed = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the proposed policy {path}: {exc}")
        if not isinstance(proposed, dict):
            raise CommandError("the proposed policy must be a JSON object")
        return proposed

    def _quota(self, spec: str, now: dict):
        """DEPT:FLAVOR:NOMINAL[:BORROW[:LEND]]; a limit left out keeps its current value, an empty one
        (or ``none``) is unlimited."""
        parts = spec.split(":")
        if len(parts) < 3 or len(parts) > 5:
            raise CommandError(f"--quota {spec!r}: use DEPT:FLAVOR:NOMINAL[:BORROW[:LEND]]")
        dept, flavor, *numbers = parts
        current = now.get(dept, {}).get(flavor, {})
        numbers += [current.get(f) for f in QUOTA_FIELDS[len(numbers):]]
        try:
            return quota_change(dept, flavor, *numbers)
        except WhatIfError as exc:
            raise CommandError(f"--quota {spec!r}: {exc.message}")
