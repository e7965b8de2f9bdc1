"""How the lab file says what a change does: ``field: old -> new`` lines, shared by every section of
``manage.py lab apply`` (``labfile`` and ``labfile_workloads``)."""

from __future__ import annotations


def shown(v) -> str:
    """A value as the lab file writes it (YAML's null, true and false)."""
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def field_changes(old: dict, new: dict) -> list[str]:
    """``field: old -> new`` for each changed field; for something new (``old`` empty), ``field: value``."""
    if not old:
        return [f"{k}: {shown(v)}" for k, v in new.items() if v is not None]
    return [f"{k}: {shown(old.get(k))} -> {shown(new.get(k))}" for k in new if old.get(k) != new.get(k)]


def flat_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """``a.b: old -> new`` for each changed leaf of two nested dicts (a policy, a template's spec)."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += flat_changes(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {shown(a)} -> {shown(b)}")
    return out
