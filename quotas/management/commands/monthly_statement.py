"""Print a monthly statement per department from the ledger: opening balance, refills, adjustments,
charges, refunds, closing balance, what is still held, and spend per user.

    manage.py monthly_statement                  # this month, every department with a wallet
    manage.py monthly_statement --month 2026-10 --department vision
    manage.py monthly_statement --json
"""

from __future__ import annotations

import json
from datetime import date

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.models import Department
from quotas.services.reports import monthly_statement
from quotas.templatetags.budgets import credits


class Command(BaseCommand):
    help = "Print a monthly statement per department (from the append-only ledger)."

    def add_arguments(self, parser):
        parser.add_argument("--month", help="YYYY-MM (default: the current month)")
        parser.add_argument("--department", help="a department slug (default: all with a wallet)")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args, month=None, department=None, json=False, **options):
        month_d = self._month(month)
        depts = Department.objects.order_by("slug")
        if department:
            depts = depts.filter(slug=department)
            if not depts.exists():
                raise CommandError(f"No department {department!r}.")
        else:
            depts = depts.filter(wallet__isnull=False)
        statements = [monthly_statement(month=month_d, department=d) for d in depts]
        if json:
            self.stdout.write(_dumps(statements))
            return
        if not statements:
            self.stdout.write("No department has a wallet: budgets are not in use.")
        for s in statements:
            self._print(s)

    def _month(self, value: str | None) -> date:
        if not value:
            return timezone.localdate().replace(day=1)
        try:
            year, month = (int(x) for x in value.split("-"))
            return date(year, month, 1)
        except ValueError:
            raise CommandError(f"--month must be YYYY-MM, got {value!r}.")

    def _print(self, s: dict) -> None:
        w = self.stdout.write
        w(f"Statement {s['month']} — {s['department']}")
        if not s["metered"]:
            w("  no wallet (not metered)\n")
            return
        for label, key in (("Opening balance", "opening_mcr"), ("Refills", "refills_mcr"),
                           ("Adjustments", "adjustments_mcr"), ("Charges", "charges_mcr"),
                           ("Refunds", "refunds_mcr"), ("Closing balance", "closing_mcr"),
                           ("Held at month end", "held_at_end_mcr")):
            sign = "-" if key == "charges_mcr" and s[key] else " "
            w(f"  {label:<20} {sign}{credits(s[key]):>20}")
        w(f"  {'GPU-hours':<20} {s['gpu_hours']:>21} ({s['attempts']} attempts)")
        if s["users"]:
            w("  By user:")
            for u in s["users"]:
                w(f"    {u['user']:<18} {credits(u['net_mcr']):>20}  {u['gpu_hours']} GPU-h")
        w("")


def _dumps(value) -> str:
    return json.dumps(value, indent=1, default=str)
