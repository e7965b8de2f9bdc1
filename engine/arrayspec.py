"""Job arrays as users write them (Slurm's ``--array``), and the placeholders a task's command and env may use.

Indices: ``0-63`` (a range, both ends included), ``1,3,5`` (a list), ``0-30:10`` (a range with a step: 0, 10,
20, 30), mixed with commas (``0-3,8,10-20:5``), and an optional throttle after ``%``: ``0-63%8`` runs at most 8
tasks at once. Each index appears once; indices are whole numbers from 0 to ``MAX_INDEX``.

Placeholders: ``{{index}}`` (the task's index) and ``{{count}}`` (the number of tasks) in a task's command
arguments and env values, spaces allowed inside the braces (``{{ index }}``). Any other ``{{...}}``, or an
unclosed ``{{``, is refused, so a typo never reaches the job as text. Every task also gets
``PORTAL_ARRAY_ID``, ``PORTAL_ARRAY_INDEX`` and ``PORTAL_ARRAY_COUNT`` in its environment.

Pure: no Django; the API and the submit form call it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_INDEX = 1_000_000
PLACEHOLDERS = ("index", "count")
# ASCII digits only: ``\d`` would take any script's digits ("٣", "３"), which int() reads but nobody means
_ITEM = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?$")
_DIGITS = re.compile(r"^[0-9]+$")
_MAX_DIGITS = len(str(MAX_INDEX))  # longer numbers are refused before int() reads them
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class ArraySpecError(ValueError):
    """A malformed array or placeholder; the message says what to write instead."""


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: tuple[int, ...]  # ascending
    throttle: int | None = None

    @property
    def count(self) -> int:
        return len(self.indices)


def parse_array(text: str, *, max_tasks: int) -> ArraySpec:
    """``"0-63%8"`` -> ArraySpec(indices=(0, ..., 63), throttle=8); raises ArraySpecError."""
    if not isinstance(text, str) or not text.strip():
        raise ArraySpecError('Give the task indices, e.g. "0-63", "1,3,5" or "0-63%8" (at most 8 at once).')
    body, pct, throttle_text = text.strip().partition("%")
    throttle = None
    if pct:
        # str.isdigit() is true of "²", which int() refuses; and a throttle is stored in a 32-bit column
        throttle_text = throttle_text.strip()
        if not _DIGITS.match(throttle_text) or _number(throttle_text) < 1:
            raise ArraySpecError(f"The throttle after '%' must be a whole number of at least 1, got {throttle_text[:40]!r}.")
        throttle = _number(throttle_text)
        if throttle > max_tasks:
            raise ArraySpecError(f"The throttle after '%' can be at most {max_tasks}, the most tasks an array has; "
                                 "leave out '%' for no limit.")
    seen: set[int] = set()
    for item in body.split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            raise ArraySpecError(f"{item.strip()[:40]!r} is not an index, a range A-B or a stepped range A-B:S.")
        start = _number(m.group(1))
        end = _number(m.group(2)) if m.group(2) is not None else start
        step = _number(m.group(3)) if m.group(3) is not None else 1
        if end < start:
            raise ArraySpecError(f"In {item.strip()!r} the range ends before it starts.")
        if not 1 <= step <= MAX_INDEX:
            raise ArraySpecError(f"In {item.strip()[:40]!r} the step must be from 1 to {MAX_INDEX}.")
        if end > MAX_INDEX:
            raise ArraySpecError(f"Indices go up to {MAX_INDEX}.")
        if (end - start) // step + 1 + len(seen) > max_tasks:
            raise ArraySpecError(f"At most {max_tasks} tasks per array.")
        for i in range(start, end + 1, step):
            if i in seen:
                raise ArraySpecError(f"Index {i} is given twice.")
            seen.add(i)
    return ArraySpec(indices=tuple(sorted(seen)), throttle=throttle)


def _number(digits: str) -> int:
    """ASCII digits as an int, or one past MAX_INDEX when they are too long to be an index (so a thousand-digit
    number is never converted, and every bound check refuses it)."""
    stripped = digits.lstrip("0") or "0"
    return int(stripped) if len(stripped) <= _MAX_DIGITS else MAX_INDEX + 1


def placeholder_problems(text: str) -> list[str]:
    """What is wrong with the placeholders of one command argument or env value ([] when nothing)."""
    problems = []
    for m in _PLACEHOLDER.finditer(text):
        if m.group(1) not in PLACEHOLDERS:
            problems.append(f"Unknown placeholder {m.group(0)!r}: use {{{{index}}}} or {{{{count}}}}.")
    rest = _PLACEHOLDER.sub("", text)
    if "{{" in rest:
        problems.append(f"An unclosed or malformed '{{{{' in {text[:60]!r}: write {{{{index}}}} or {{{{count}}}}.")
    return problems


def substitute(text: str, *, index: int, count: int) -> str:
    """``text`` with its placeholders filled for one task (``placeholder_problems(text)`` must be empty)."""
    values = {"index": str(index), "count": str(count)}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
