"""Job templates: saved submissions with a name (personal, or the department's), and "clone this job".

A template's ``spec`` is a job submission body (the fields of POST /api/v1/jobs). The entry points validate
it with the submission's own serializer before calling these services, so a template that would not submit is
never stored; a submission from a template is the template's spec with the body's fields on top
(``merged_spec``), validated again as any submission (flavors and clusters may have changed since).
"""

from __future__ import annotations

import copy

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import Forbidden, ValidationFailed
from portal.tenancy import VIEW, member
from scheduling.models import Job, JobTemplate, TemplateScope

# The submission fields a template may hold and a clone copies: every field of POST /api/v1/jobs. Kept equal
# to JobSubmitSerializer's fields by a test, so a new submission field cannot be forgotten by clones.
SPEC_FIELDS = (
    "name", "image", "command", "env", "flavor", "gpus", "pods", "cpu", "memory", "tier", "urgency", "task_type",
    "deadline", "max_runtime_s", "bid", "termination_grace_s", "checkpoint_interval_s", "pdb_min_available",
    "cluster_selector", "cluster_preference", "mounts", "checkpoint", "shm_mb", "max_retries", "retry_on_exit_codes",
    "secrets", "kind", "session_image", "port", "readiness_path", "roles",
    "preemptible", "notice_s", "min_pods", "global_batch_size", "topology_level", "topology_required",
    "gpu_memory_gib", "gpu_cores", "gpu_replicas",
)


def _duplicate(name: str) -> ValidationFailed:
    return ValidationFailed(f"A template named {name!r} exists already here.", fields={
        "name": [{"code": "unique", "message": f"A template named {name!r} exists already here."}]})


def _audit_state(t: JobTemplate) -> dict:
    return {"name": t.name, "scope": t.scope, "description": t.description, "spec": t.spec}


def template_create(*, user, name: str, spec: dict, scope: str = TemplateScope.PERSONAL,
                    description: str = "", department=None) -> JobTemplate:
    """Save ``spec`` (already validated as a submission) as a template. A personal template is the user's; a
    department template is published by a department admin to their own department. Only the lab file names
    ``department`` (its entry point decided who may apply it, as for every row the file declares)."""
    if scope == TemplateScope.DEPARTMENT:
        if department is None:
            m = member(user)
            if not m.is_department_admin:
                raise Forbidden("Only the department's admins can publish department templates.")
            department = m.department
        owner = None
    else:
        department, owner = member(user).department, user
    t = JobTemplate(name=name, scope=scope, department=department, owner=owner, description=description,
                    spec=spec, created_by=user)
    try:
        with transaction.atomic():
            t.save(force_insert=True)
            audit(actor=user, action="template.create", obj=t, department=department, new=_audit_state(t))
    except IntegrityError:
        raise _duplicate(name)
    return t


def template_update(*, user, template: JobTemplate, name: str | None = None, description: str | None = None,
                    spec: dict | None = None) -> JobTemplate:
    """Change a template's name, description or spec (already validated). The entry point checked that
    ``user`` may ``change`` it (``JobTemplate.objects.get_or_404(user, CHANGE, ...)``; the lab file: who may apply it)."""
    old = _audit_state(template)
    if name is not None:
        template.name = name
    if description is not None:
        template.description = description
    if spec is not None:
        template.spec = spec
    template.updated_at = timezone.now()
    try:
        with transaction.atomic():
            template.save()
            audit(actor=user, action="template.update", obj=template, department=template.department,
                  old=old, new=_audit_state(template))
    except IntegrityError:
        raise _duplicate(template.name)
    return template


def template_delete(*, user, template: JobTemplate) -> None:
    """Delete a template; the entry point checked ``change``, as for ``template_update``."""
    with transaction.atomic():
        audit(actor=user, action="template.delete", obj=template, department=template.department,
              old=_audit_state(template))
        template.delete()


def template_for_submission(*, user, name=None, template_id=None) -> JobTemplate:
    """The template a submission names: by id, or by name, the user's own first, then their department's.
    One the user may not read is reported exactly like one that does not exist (a field error)."""
    qs = JobTemplate.objects.restrict(user, VIEW)
    if template_id is not None:
        found = None
        if isinstance(template_id, int) and not isinstance(template_id, bool):
            found = qs.filter(pk=template_id).first()
        if found is None:
            raise ValidationFailed("No such template.", fields={
                "template_id": [{"code": "not_found", "message": f"No template with id {template_id!r}."}]})
        return found
    if not isinstance(name, str) or not name:
        raise ValidationFailed("Name the template.", fields={
            "template": [{"code": "invalid", "message": "A template name (a string) is required."}]})
    m = member(user)
    candidates = [t for t in qs.filter(name=name) if t.scope == TemplateScope.PERSONAL
                  or t.department_id == m.department_id]
    candidates.sort(key=lambda t: (t.scope != TemplateScope.PERSONAL, t.pk))
    if not candidates:
        raise ValidationFailed(f"No template named {name!r}.", fields={"template": [{
            "code": "not_found",
            "message": f"No template named {name!r} of yours or of your department (GET /api/v1/templates)."}]})
    return candidates[0]


def merged_spec(template: JobTemplate, body: dict) -> dict:
    """The submission a template and a body make: the template's fields, each replaced whole by the body's
    field of the same name (an ``env`` in the body replaces the template's ``env``)."""
    return {**template.spec, **body}


def spec_of_job(job: Job) -> dict:
    """What resubmitting ``job`` needs: its submission fields as POST /api/v1/jobs takes them. What the portal
    decided (state, placement, user tier, department) is not part of it, nor a deadline already passed (it
    would refuse the resubmission)."""
    spec = {
        "name": job.name, "image": job.image, "command": list(job.command), "env": dict(job.env or {}),
        "flavor": job.flavor.name, "gpus": job.gpus_per_pod, "pods": job.pods, "cpu": f"{job.cpu_millicores}m",
        "memory": f"{job.memory_mib}Mi", "tier": job.tier, "urgency": job.urgency, "task_type": job.task_type,
        "max_runtime_s": job.max_runtime_s, "bid": job.bid, "termination_grace_s": job.termination_grace_s,
        "checkpoint_interval_s": job.checkpoint_interval_s, "pdb_min_available": job.pdb_min_available,
        "cluster_selector": dict(job.cluster_selector or {}), "cluster_preference": dict(job.cluster_preference or {}),
        "mounts": [dict(m) for m in job.mounts or []], "shm_mb": job.shm_mb or None,
        "max_retries": job.max_retries, "retry_on_exit_codes": list(job.retry_on_exit_codes or []),
        # which department secrets it uses, by name and key: a clone never carries a value
        "secrets": [dict(u) for u in job.secrets or []],
    }
    if job.topology_level:
        spec.update(topology_level=job.topology_level, topology_required=job.topology_required)
    if job.kind != "batch":  # a session from a lab image is cloned by the image's name, not what it resolved to
        spec["kind"] = job.kind
        if job.session_image:
            spec["session_image"] = job.session_image
            for field in ("image", "command"):
                spec.pop(field)
        else:
            spec.update(port=job.port, readiness_path=job.readiness_path)
        if not spec.get("command"):
            spec.pop("command", None)
    if job.preemptible is not None:  # the owner's own choice apart from the tier's
        spec["preemptible"] = job.preemptible
    if job.min_pods is not None:  # a resizable job's size range, and the batch it keeps across sizes
        spec["min_pods"] = job.min_pods
        if job.global_batch_size:
            spec["global_batch_size"] = job.global_batch_size
    if job.share_milli:  # a fraction of one GPU per pod (docs/fractions.md), asked for as it was
        if job.gpu_replicas:
            spec["gpu_replicas"] = job.gpu_replicas
        else:
            spec["gpu_memory_gib"] = job.gpu_memory_mib / 1024
            if job.gpu_cores:
                spec["gpu_cores"] = job.gpu_cores
    roles = list(job.roles.order_by("index").select_related("flavor"))
    if len(roles) > 1 or (roles and roles[0].name != "main"):
        # a job of roles is resubmitted as one: its size is its roles', never set at the top
        for field in ("pods", "gpus", "cpu", "memory", "shm_mb"):
            spec.pop(field, None)
        spec["roles"] = [_role_spec(r) for r in roles]
    if job.checkpoint:  # the directory by the names it was asked with (the same source, path and cluster)
        spec["checkpoint"] = {k: job.checkpoint[k] for k in ("source", "path", "cluster") if job.checkpoint.get(k)}
    if job.deadline is not None and job.deadline > timezone.now():
        spec["deadline"] = job.deadline.isoformat().replace("+00:00", "Z")
    return spec


def _role_spec(role) -> dict:
    """A role as POST /api/v1/jobs takes it (the fields left at their defaults left out)."""
    out: dict = {"name": role.name, "pods": role.pods, "gpus": role.gpus_per_pod, "cpu": f"{role.cpu_millicores}m",
                 "memory": f"{role.memory_mib}Mi", "failure_policy": role.failure_policy}
    if role.image:
        out["image"] = role.image
    if role.command:
        out["command"] = list(role.command)
    if role.shm_mb:
        out["shm_mb"] = role.shm_mb
    if role.flavor_id and not role.gpus_per_pod:
        out["flavor"] = role.flavor.name
    return out


def templates_for(user, *, scope: str | None = None):
    """The templates ``user`` reads (their own and their department's), owner and department in the same query."""
    qs = JobTemplate.objects.restrict(user, VIEW).select_related("department", "owner", "created_by")
    if scope:
        qs = qs.filter(scope=scope)
    return qs


# A data worker as "add data workers" adds it: a CPU role whose failure restarts the pod alone. Its command is
# the job's own (a script tells the roles apart by PORTAL_ROLE); the person edits it before submitting.
DATA_WORKER_ROLE = "data"
DATA_WORKER_CPU, DATA_WORKER_MEMORY = "4", "8Gi"
MAX_ADDED_WORKERS = 64


def with_data_workers(spec: dict, count: int) -> dict:
    """``spec`` (``spec_of_job``'s) with ``count`` more CPU data workers: the job's restart-pod CPU role grown,
    or a ``data`` role added (a job of one role becomes a ``trainer`` role of its own size beside it). What the
    saw-tooth hint ("GPUs wait for data") offers. Refused (400 on ``add_data_workers``) for a count outside 1 to
    64 and for a job without GPUs (its input pipeline feeds no GPU)."""
    if not 1 <= count <= MAX_ADDED_WORKERS:
        raise _field_error("add_data_workers", f"From 1 to {MAX_ADDED_WORKERS}.", "invalid")
    out = copy.deepcopy(spec)
    roles = out.get("roles")
    if roles:
        if not any(r.get("gpus") for r in roles):
            raise _field_error("add_data_workers", "A job without GPUs has no GPUs to feed.", "no_gpus")
        grown = next((r for r in roles if not r.get("gpus") and r.get("failure_policy") == "restart-pod"), None)
        if grown is not None:
            grown["pods"] += count
            return out
        names = {r["name"] for r in roles}
        name = next(n for n in (DATA_WORKER_ROLE, *(f"{DATA_WORKER_ROLE}{i}" for i in range(2, 99)))
                    if n not in names)
    else:
        if not out.get("gpus"):
            raise _field_error("add_data_workers", "A job without GPUs has no GPUs to feed.", "no_gpus")
        trainer = {"name": "trainer", "pods": out.pop("pods", 1), "gpus": out.pop("gpus")}
        for field in ("cpu", "memory", "shm_mb"):
            value = out.pop(field, None)
            if value:
                trainer[field] = value
        roles = out["roles"] = [trainer]
        name = DATA_WORKER_ROLE
    roles.append({"name": name, "pods": count, "gpus": 0, "cpu": DATA_WORKER_CPU, "memory": DATA_WORKER_MEMORY,
                  "failure_policy": "restart-pod"})
    return out


def _field_error(field: str, message: str, code: str) -> ValidationFailed:
    return ValidationFailed(f"{field}: {message}", fields={field: [{"code": code, "message": message}]})
