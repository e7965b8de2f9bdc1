"""GPU flavors (whole GPUs and MIG profiles), audited. A flavor in use (nodes, quotas, jobs, prices) cannot
be deleted: its history refers to it."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from quotas.models import FLAVOR_NAME, RESOURCE_NAME, Flavor
from quotas.services.base import field_error

FLAVOR_FIELDS = ("resource_name", "node_labels", "gpu_memory_gib", "description")


def _values(flavor: Flavor) -> dict:
    return {f: getattr(flavor, f) for f in FLAVOR_FIELDS}


def _validate(values: dict, name: str | None = None) -> None:
    """The model's rules for a name and a resource name, every error at once."""
    errors = {}
    checks = [("resource_name", RESOURCE_NAME, values.get("resource_name"))]
    if name is not None:
        checks.append(("name", FLAVOR_NAME, name))
    for field, check, value in checks:
        if value is None:
            continue
        try:
            check(value)
        except ValidationError as exc:
            errors[field] = [{"code": "invalid", "message": m} for m in exc.messages]
    if values.get("gpu_memory_gib", 0) is not None and values.get("gpu_memory_gib", 0) < 0:
        errors["gpu_memory_gib"] = [{"code": "min_value", "message": "0 or more."}]
    if errors:
        raise ValidationFailed(fields=errors)


def flavor_create(*, actor, name: str, **values) -> Flavor:
    _validate(values, name)
    with transaction.atomic():
        if Flavor.objects.filter(name=name).exists():
            raise field_error("name", f"A flavor named {name} exists already.", "unique")
        flavor = Flavor(name=name, **values)
        try:
            with transaction.atomic():
                flavor.save()
        except IntegrityError:
            raise field_error("name", f"A flavor named {name} exists already.", "unique")
        audit(actor=actor, action="flavor.create", obj=flavor, new={"name": name, **_values(flavor)})
    return flavor


def flavor_update(*, flavor: Flavor, actor, comment: str = "", **values) -> Flavor:
    """Change what a flavor is requested as and where it runs. Its name is its identity (jobs, prices and lab
    files refer to it) and does not change."""
    _validate(values)
    with transaction.atomic():
        flavor = Flavor.objects.select_for_update().get(pk=flavor.pk)
        old = _values(flavor)
        for f in FLAVOR_FIELDS:
            if f in values:
                setattr(flavor, f, values[f])
        if _values(flavor) != old:
            flavor.save()
            audit(actor=actor, action="flavor.update", obj=flavor, old=old, new=_values(flavor), comment=comment)
    return flavor


def flavor_delete(*, flavor: Flavor, actor, comment: str = "") -> None:
    if flavor.prices.exists():
        raise Conflict(f"{flavor.name} has prices: delete them first (a price list must not change silently).")
    with transaction.atomic():
        audit(actor=actor, action="flavor.delete", obj=flavor, old={"name": flavor.name, **_values(flavor)},
              comment=comment)
        try:
            with transaction.atomic():
                flavor.delete()
        except ProtectedError:
            raise Conflict(f"{flavor.name} is in use (nodes, quotas or jobs refer to it): remove those first; "
                           "jobs keep it for their history.")
