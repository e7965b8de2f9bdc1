"""Departments: create, rename, archive (history kept), restore.

Archiving keeps everything the department ever did (jobs, ledger, audit entries, members) and stops what it
would do next: its waiting jobs (pending approval, queued, preempted and waiting to run again) are
cancelled, its admitted and running jobs run to their end, and it takes no new jobs, members or quota
changes. Its quotas are left as they are (they are history too); the impact says how many GPUs they still
reserve. Archiving needs ``confirm``: without it the service refuses with the impact, so a caller shows it
first.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from portal.models import SLUG, Department, Membership, not_reserved
from quotas.models import Quota
from scheduling.models import ACTIVE_STATES, Job, JobState
from scheduling.services.jobs import job_cancel

WAITING = (JobState.PENDING_APPROVAL, JobState.QUEUED, JobState.PREEMPTED)


def _field(field: str, messages: list[str], code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": m} for m in messages]})


def validate_slug(slug: str) -> None:
    """The slug rules (a Kubernetes namespace name, not a word of the portal's URLs, unique), all at once."""
    problems = []
    for check in (SLUG, not_reserved):
        try:
            check(slug)
        except ValidationError as exc:
            problems.extend({"code": e.code or "invalid", "message": " ".join(e.messages)} for e in exc.error_list)
    if not problems and Department.objects.filter(slug=slug).exists():
        problems.append({"code": "unique", "message": f"A department {slug} exists already."})
    if problems:
        raise ValidationFailed(fields={"slug": problems})


def department_create(*, actor, slug: str, name: str, comment: str = "") -> Department:
    validate_slug(slug)
    if not name.strip():
        raise _field("name", ["Give the department a name."], "required")
    with transaction.atomic():
        dept = Department.objects.create(slug=slug, name=name.strip())
        audit(actor=actor, action="department.create", obj=dept, department=dept,
              new={"slug": slug, "name": dept.name}, comment=comment)
    return dept


def department_rename(*, department: Department, actor, name: str, comment: str = "") -> Department:
    """Change the display name. The slug stays: it names the department's Kubernetes namespace and URLs."""
    if not name.strip():
        raise _field("name", ["Give the department a name."], "required")
    with transaction.atomic():
        dept = Department.objects.select_for_update().get(pk=department.pk)
        old = dept.name
        if old != name.strip():
            dept.name = name.strip()
            dept.save(update_fields=["name"])
            audit(actor=actor, action="department.rename", obj=dept, department=dept, old={"name": old},
                  new={"name": dept.name}, comment=comment)
    return dept


def archive_impact(department: Department) -> dict:
    """What archiving would do, in numbers and in words."""
    jobs = Job.objects.filter(department=department)
    waiting = jobs.filter(state__in=WAITING).count()
    active = jobs.filter(state__in=ACTIVE_STATES).count()
    nominal = sum(Quota.objects.filter(department=department).nominal_by_flavor().values())
    members = Membership.objects.filter(department=department).count()
    text = [
        f"{waiting} waiting job(s) (pending approval, queued or preempted) will be cancelled.",
        f"{active} admitted or running job(s) will run to their end; nothing new will start.",
        f"{members} member(s) keep their accounts and can read the history, but cannot submit jobs.",
        f"Its quotas stay ({nominal} nominal GPU(s) still reserved): set them to 0 to give the GPUs back.",
        "Its jobs, ledger and audit entries are kept.",
    ]
    return {"waiting_jobs": waiting, "active_jobs": active, "members": members, "nominal_gpus": nominal,
            "text": text}


def department_archive(*, department: Department, actor, reason: str, confirm: bool) -> dict:
    """Archive (see the module's docstring). Returns the impact, with the ids of the jobs cancelled."""
    if department.is_archived:
        raise Conflict(f"{department.slug} is archived already.")
    impact = archive_impact(department)
    errors = {}
    if not reason.strip():
        errors["reason"] = [{"code": "required", "message": "Say why the department is archived."}]
    if not confirm:
        errors["confirm"] = [{"code": "required", "message": "Confirm the archiving: " + " ".join(impact["text"])}]
    if errors:
        raise ValidationFailed("Archiving needs a reason and a confirmation.", fields=errors,
                               detail={"impact": impact})
    cancelled = []
    with transaction.atomic():
        dept = Department.objects.select_for_update().get(pk=department.pk)
        if dept.is_archived:
            raise Conflict(f"{department.slug} is archived already.")
        dept.archived_at = timezone.now()
        dept.save(update_fields=["archived_at"])
        for job in Job.objects.filter(department=dept, state__in=WAITING).select_related("department", "owner") \
                .order_by("pk"):
            job_cancel(user=actor, job=job, comment=f"department {dept.slug} archived: {reason.strip()}",
                       by_platform=actor is None)
            cancelled.append(job.pk)
        audit(actor=actor, action="department.archive", obj=dept, department=dept, old={"archived_at": None},
              new={"archived_at": dept.archived_at.isoformat(), "cancelled_jobs": cancelled,
                   "active_jobs": impact["active_jobs"]}, comment=reason.strip())
    department.archived_at = dept.archived_at
    return {**impact, "cancelled_job_ids": cancelled}


def department_restore(*, department: Department, actor, reason: str = "") -> Department:
    """Take a department out of the archive: it takes jobs and members again (cancelled jobs stay so)."""
    with transaction.atomic():
        dept = Department.objects.select_for_update().get(pk=department.pk)
        if not dept.is_archived:
            raise Conflict(f"{dept.slug} is not archived.")
        old = dept.archived_at.isoformat()
        dept.archived_at = None
        dept.save(update_fields=["archived_at"])
        audit(actor=actor, action="department.restore", obj=dept, department=dept, old={"archived_at": old},
              new={"archived_at": None}, comment=reason)
    return dept
