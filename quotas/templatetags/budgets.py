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

