"""Template helpers for budgets: ``{% job_cost job as cost %}`` and ``{{ mcr|credits }}`` (portal.money, which
also gives a form field's value in credits and parses what a person types back into mcr)."""

from __future__ import annotations

from django import template

from portal import money
from quotas.services import reports

register = template.Library()


@register.simple_tag
def job_cost(job):
    return reports.job_cost(job=job)


@register.filter
def credits(mcr) -> str:
    """1234567 mcr -> "1,234.567 cr" (exact: integer arithmetic)."""
    return money.format_credits(mcr)



@register.filter
def gpu_hours(gpu_seconds) -> str:
    """5400 GPU-seconds -> "1.500" (GPU-hours, three decimals, as the ledger's memos write them)."""
    return f"{int(gpu_seconds) / 3600:.3f}"
