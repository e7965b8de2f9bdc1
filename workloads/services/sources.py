"""Declaring data sources: create, change, delete (platform admins for any department or the platform;
department admins for their own department's), audited."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from portal.audit import audit
from portal.errors import Conflict, Forbidden, ValidationFailed
from portal.models import Department
from portal.tenancy import PLATFORM, member, scope
from workloads.models import DataSource, SourceKind

FIELDS = ("kind", "claim_name", "writable", "sub_path", "description", "shared_with_all")


def _snapshot(source: DataSource) -> dict:
    return {"name": source.name, "cluster": source.cluster.name,
            "department": source.department.slug if source.department else None,
            "shared_with": sorted(d.slug for d in source.shared_with.all()),
            **{f: getattr(source, f) for f in FIELDS}}


def _check_may_declare(user, department: Department | None) -> None:
    # No actor: the platform itself (the lab file applied without --actor, the demo), as for the lab's other
    # declarations; every view passes the request's user.
    if user is None or scope(user, PLATFORM).everything:
        return
    m = member(user)
    if department is None or not m.is_department_admin or m.department_id != department.pk:
        raise Forbidden("Platform admins declare any data source; department admins their own department's.")


def kind_errors(*, kind: str, writable: bool) -> dict[str, list[dict]]:
    """What a source's kind forbids (a shared dataset is never writable), as field errors; {} when it holds.
    The service and the lab file both check through this."""
    if kind == SourceKind.DATASET and writable is True:
        return {"writable": [{"code": "read_only_kind", "message": "A shared dataset is read-only."}]}
    return {}


def _validate(source: DataSource) -> None:
    if errors := kind_errors(kind=source.kind, writable=source.writable):
        raise ValidationFailed(fields=errors)
    try:
        source.full_clean(exclude=["cluster", "department"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationFailed(fields={k: [{"code": "invalid", "message": str(m)} for m in v]
                                       for k, v in exc.message_dict.items()})


@transaction.atomic
def data_source_create(*, actor, name: str, cluster, department: Department | None = None,
                       shared_with: list[Department] | None = None, **fields) -> DataSource:
    _check_may_declare(actor, department)
    source = DataSource(name=name, cluster=cluster, department=department,
                        **{k: v for k, v in fields.items() if k in FIELDS})
    _validate(source)
    try:
        with transaction.atomic():
            source.save()
    except IntegrityError:
        raise Conflict(f"Cluster {cluster.name} already has a data source {name!r}.")
    if shared_with:
        source.shared_with.set(shared_with)
    audit(actor=actor, action="data_source.create", obj=source, department=department, new=_snapshot(source))
    return source


@transaction.atomic
def data_source_update(*, actor, source: DataSource, shared_with: list[Department] | None = None,
                       **fields) -> DataSource:
    _check_may_declare(actor, source.department)
    old = _snapshot(source)
    for k, v in fields.items():
        if k in FIELDS:
            setattr(source, k, v)
    _validate(source)
    source.save()
    if shared_with is not None:
        source.shared_with.set(shared_with)
    audit(actor=actor, action="data_source.update", obj=source, department=source.department, old=old,
          new=_snapshot(source))
    return source


@transaction.atomic
def data_source_delete(*, actor, source: DataSource) -> None:
    _check_may_declare(actor, source.department)
    if source.checkpoints.filter(deleted_at__isnull=True).exists():
        raise Conflict(f"{source.name!r} still holds checkpoint directories; they are deleted when they expire.")
    old = _snapshot(source)
    audit(actor=actor, action="data_source.delete", obj=source, department=source.department, old=old)
    source.delete()
