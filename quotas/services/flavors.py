"""GPU flavors (whole GPUs and MIG profiles), audited. A flavor in use (nodes, quotas, jobs, prices) cannot
be deleted: its history refers to it."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from quotas.models import FLAVOR_NAME, RESOURCE_NAME, Flavor, GpuSharing
from quotas.services.base import field_error

FLAVOR_FIELDS = ("resource_name", "node_labels", "gpu_memory_gib", "description", "sharing", "shared_resource_name",
                 "replicas_per_gpu")


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


def _check_sharing(flavor: Flavor) -> None:
    """How a flavor shares its GPUs must be complete (docs/fractions.md): HAMi needs the GPU's memory (a fraction
    is GPU memory), replicas need the shared resource name and at least 2 replicas per GPU; a CPU pool has no
    GPUs to share."""
    errors = {}
    if flavor.sharing and flavor.is_cpu:
        errors["sharing"] = "A CPU pool has no GPUs to share."
    elif flavor.sharing == GpuSharing.HAMI and flavor.gpu_memory_gib <= 0:
        errors["gpu_memory_gib"] = "HAMi sharing divides the GPU's memory: give it (in GiB)."
    elif flavor.sharing == GpuSharing.REPLICAS:
        if flavor.replicas_per_gpu < 2:
            errors["replicas_per_gpu"] = "How many replicas the device plugin advertises per GPU: 2 or more."
        if not flavor.shared_resource_name:
            errors["shared_resource_name"] = ("The resource the device plugin advertises the replicas as, e.g. "
                                              "nvidia.com/gpu.shared.")
    elif flavor.shared_resource_name or flavor.replicas_per_gpu:
        errors["sharing"] = "shared_resource_name and replicas_per_gpu go with sharing: replicas."
    if errors:
        raise ValidationFailed(fields={k: [{"code": "invalid_sharing", "message": v}] for k, v in errors.items()})


def flavor_create(*, actor, name: str, **values) -> Flavor:
    _validate(values, name)
    with transaction.atomic():
        if Flavor.objects.filter(name=name).exists():
            raise field_error("name", f"A flavor named {name} exists already.", "unique")
        flavor = Flavor(name=name, **values)
        _check_sharing(flavor)
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
            _check_sharing(flavor)
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
