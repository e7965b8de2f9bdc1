"""Template helpers for budgets: ``{% job_cost job as cost %}``, ``{{ mcr|credits }}`` (an amount shown) and
``{{ mcr|credits_value }}`` (an amount as a form field's value); both from portal.money, which also parses
what a person types back into mcr."""

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
def credits_value(mcr) -> str:
    """12500 mcr -> "12.5", for a form field that takes credits."""
    return money.credits_value(mcr)
