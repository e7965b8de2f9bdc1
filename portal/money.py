"""Credits as people read and type them, milli-credits (mcr) as the services, the database and the API keep them.

Pages show and take credits with up to three decimals (1 credit = 1000 mcr); everything behind a page works in
integer mcr. This module is the one place that converts between the two, in integer arithmetic so
that no amount is ever rounded: ``format_credits`` for display, ``credits_value`` for an input's value, and
``parse_credits`` for what a person typed."""

from __future__ import annotations

import re

MCR_PER_CREDIT = 1000

# Plain decimal notation only: exponents ("1e3"), "inf"/"nan", and grouping commas are refused rather than
# guessed at, so what is stored is always exactly what the person read back in the field.
_NUMBER = re.compile(r"(?P<sign>[+-]?)(?P<whole>\d*)(?:\.(?P<frac>\d*))?", re.ASCII)


class CreditsError(ValueError):
    """What a person typed is not an acceptable amount of credits; the message says why, in credits."""


def format_credits(mcr) -> str:
    """1234567 mcr -> "1,234.567 cr" (exact: integer arithmetic). None or "" -> "—"."""
    if mcr is None or mcr == "":
        return "—"
    mcr = int(mcr)
    sign = "-" if mcr < 0 else ""
    whole, frac = divmod(abs(mcr), MCR_PER_CREDIT)
    return f"{sign}{whole:,}.{frac:03d} cr"


def credits_value(mcr, *, grouped: bool = False) -> str:
    """An amount as a form field's value: 12500 mcr -> "12.5", 12000 -> "12" (what a person would type, so
    that editing a saved amount shows what was typed; ``grouped`` adds thousands separators for prose).
    None -> ""."""
    if mcr is None or mcr == "":
        return ""
    sign = "-" if int(mcr) < 0 else ""
    whole, frac = divmod(abs(int(mcr)), MCR_PER_CREDIT)
    fraction = f".{frac:03d}".rstrip("0") if frac else ""
    return f"{sign}{whole:,}{fraction}" if grouped else f"{sign}{whole}{fraction}"


def parse_credits(raw, *, min_mcr: int | None = 0, max_mcr: int | None = None,
                  negative_message: str | None = None) -> int:
    """What a person typed in credits -> integer mcr. Raises CreditsError with a message in credits when it is
    not a plain number, has more than three decimals, or lies outside [min_mcr, max_mcr]."""
    match = _NUMBER.fullmatch(str(raw).strip())
    if not match or not (match["whole"] or match["frac"]):
        raise CreditsError("Enter an amount in credits, e.g. 12.5.")
    too_large = CreditsError("Too large: enter " + (f"at most {credits_value(max_mcr, grouped=True)} credits."
                                                   if max_mcr is not None else "a smaller amount."))
    if len(match["whole"]) > 30:  # beyond any wallet, and int() refuses very long digit strings
        raise too_large
    frac = (match["frac"] or "").rstrip("0")
    if len(frac) > 3:
        raise CreditsError("Use at most 3 decimals: 0.001 credits is the smallest amount.")
    mcr = int(match["whole"] or "0") * MCR_PER_CREDIT + int(frac.ljust(3, "0"))
    if match["sign"] == "-":
        mcr = -mcr
    if min_mcr is not None and mcr < min_mcr:
        if min_mcr == 0:
            raise CreditsError(negative_message or "Enter 0 or more credits.")
        raise CreditsError(f"Enter at least {credits_value(min_mcr, grouped=True)} credits.")
    if max_mcr is not None and mcr > max_mcr:
        raise too_large
    return mcr
