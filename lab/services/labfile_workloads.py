"""The lab file's sections for what jobs run with: department templates, department secrets and data sources,
applied like every section (``lab.services.labfile``: each change through the service that owns the row, in its
own savepoint, every error with its line)."""

from __future__ import annotations

import os

from rest_framework.exceptions import ValidationError as DRFValidationError

from lab.services.diffs import field_changes, flat_changes
from portal.models import Department
from scheduling.api.serializers import validate_job_spec
from scheduling.models import Cluster, JobTemplate, TemplateScope
from scheduling.services import templates as template_services
from workloads.models import DataSource, DepartmentSecret
from workloads.services import secrets as secret_services
from workloads.services import sources as source_services


def _secret_values(d: dict) -> tuple[dict[str, str], list[str]]:
    """A declared secret's values, read from the environment, and the variables that are not set."""
    names = dict(d.get("values_env") or {})
    if d.get("password_env"):
        names["password"] = d["password_env"]
    values = {str(k): os.environ[v] for k, v in names.items() if v in os.environ}
    return values, sorted(v for v in names.values() if v not in os.environ)


class WorkloadSections:
    """The ``templates:``, ``secrets:`` and ``data_sources:`` steps of an apply (``self.run`` / ``self.fail`` are
    the applier's)."""

    # ---------------------------------------------------------------- templates
    def templates(self):
        """Department templates: each spec checked as a submission (by the submission's own serializer, after
        the file's flavors and clusters are in place), created or changed by (department, name); with prune,
        the department templates the file does not declare are deleted. Personal templates are their owners'
        and never touched."""
        declared = self.data.get("templates")
        if declared is None:
            return
        keep = set()
        for i, t in enumerate(declared):
            path = ("templates", i)
            dept = Department.objects.filter(slug=t["department"]).first()
            if dept is None:
                continue  # its department failed to be created: that error is reported already
            keep.add((dept.pk, t["name"]))
            try:
                validate_job_spec(t["spec"])
            except DRFValidationError as exc:
                for field, messages in exc.detail.items():
                    for message in messages if isinstance(messages, list) else [messages]:
                        self.fail((*path, "spec", field), str(message))
                continue
            want = {"description": t.get("description", ""), "spec": t["spec"]}
            cur = JobTemplate.objects.filter(scope=TemplateScope.DEPARTMENT, department=dept, name=t["name"]).first()
            if cur is None:
                self.run(path, "+", f"template {dept.slug}/{t['name']}", [f"image: {t['spec'].get('image')}"],
                         lambda d=dept, t=t, w=want: template_services.template_create(
                             user=self.actor, name=t["name"], scope=TemplateScope.DEPARTMENT, department=d, **w))
            elif {"description": cur.description, "spec": cur.spec} != want:
                self.run(path, "~", f"template {dept.slug}/{t['name']}",
                         flat_changes({"description": cur.description, "spec": cur.spec}, want),
                         lambda c=cur, w=want: template_services.template_update(user=self.actor, template=c, **w))
        if self.prune:
            for cur in JobTemplate.objects.filter(scope=TemplateScope.DEPARTMENT).select_related("department"):
                if (cur.department_id, cur.name) not in keep:
                    self.run(("templates",), "-", f"template {cur.department.slug}/{cur.name}", [],
                             lambda c=cur: template_services.template_delete(user=self.actor, template=c))

    # ---------------------------------------------------------------- department secrets
    def secrets(self):
        """``secrets:``: each value is read from the environment variable the file names, never from the
        file. A secret that exists keeps its values when its variables are not set (so an exported file can
        be applied without them); a new value secret needs them. Lines name secrets and keys, never values."""
        declared = set()
        for i, d in enumerate(self.data.get("secrets") or []):
            path = ("secrets", i)
            dept = Department.objects.filter(slug=d["department"]).first()
            if dept is None:
                continue  # its department failed to be created: that error is reported already
            declared.add((dept.pk, d["name"]))
            kind, purpose = d["kind"], d.get("purpose", "env")
            values, missing = _secret_values(d)
            want = {"reference_name": d.get("reference_name", ""), "keys": sorted(d.get("keys") or []),
                    "registry": d.get("registry", ""), "username": d.get("username", "")}
            cur = DepartmentSecret.objects.filter(department=dept, name=d["name"]).first()
            what = f"secret {dept.slug}/{d['name']}"
            if cur is None:
                if missing:
                    self.fail((*path, "values_env" if "values_env" in d else "password_env"),
                              f"environment variable(s) {', '.join(missing)} not set: the values of a new secret "
                              "are read from the environment")
                    continue
                keys = sorted(values) if kind == "value" else want["keys"]
                self.run(path, "+", what, [f"kind: {kind}", f"purpose: {purpose}"] + (
                    [f"keys: {', '.join(keys)}"] if keys else []),
                         lambda dp=dept, d=d, v=values, w=want: secret_services.secret_create(
                             actor=self.actor, department=dp, name=d["name"], kind=d["kind"],
                             purpose=d.get("purpose", "env"), values=v or None, **w))
                continue
            if (cur.kind, cur.purpose) != (kind, purpose):
                self.fail(path, f"{what} is a {cur.kind} secret for {cur.purpose}: its kind and purpose cannot "
                                "change (remove it with --prune, or delete it, and declare it again)")
                continue
            changes: dict = {}
            details: list[str] = []
            for k in ("reference_name", "registry", "username") + (("keys",) if kind == "reference" else ()):
                if getattr(cur, k) != want[k]:
                    changes[k] = want[k]
                    details += field_changes({k: getattr(cur, k)}, {k: want[k]})
            if kind == "value" and not missing and values != cur.values:
                changes["values"] = values
                details.append(f"values of {', '.join(sorted(values))}: rotated")
            if changes:
                self.run(path, "~", what, details,
                         lambda c=cur, ch=changes: secret_services.secret_update(actor=self.actor, secret=c, **ch))
        if self.prune:
            for secret in DepartmentSecret.objects.select_related("department").order_by("department__slug", "name"):
                if (secret.department_id, secret.name) not in declared:
                    self.run(("secrets",), "-", f"secret {secret.department.slug}/{secret.name}", [],
                             lambda sc=secret: secret_services.secret_delete(actor=self.actor, secret=sc))

    # ---------------------------------------------------------------- data sources
    def data_sources(self):
        """``data_sources:``, matched by cluster and name, after the file's clusters and departments are in
        place. The owner cannot change in place (it decides who may change the source); with prune, the sources
        the file does not declare are deleted (refused while one holds checkpoint directories)."""
        declared = set()
        for i, d in enumerate(self.data.get("data_sources") or []):
            path = ("data_sources", i)
            cluster = Cluster.objects.filter(name=d["cluster"]).first()
            owner = Department.objects.filter(slug=d["department"]).first() if d.get("department") else None
            shared = list(Department.objects.filter(slug__in=d.get("shared_with") or []).order_by("slug"))
            if cluster is None or (d.get("department") and owner is None) or \
                    len(shared) != len(set(d.get("shared_with") or [])):
                continue  # what it names failed to be created: that error is reported already
            declared.add((cluster.pk, d["name"]))
            want = {"kind": d.get("kind", "pvc"), "claim_name": d["claim_name"],
                    "writable": bool(d.get("writable", False)), "sub_path": d.get("sub_path", ""),
                    "description": d.get("description", ""), "shared_with_all": bool(d.get("shared_with_all", False))}
            want_shared = sorted(x.slug for x in shared)
            what = f"data source {cluster.name}/{d['name']}"
            cur = DataSource.objects.filter(cluster=cluster, name=d["name"]).select_related("department").first()
            if cur is None:
                self.run(path, "+", what, [f"kind: {want['kind']}", f"claim: {want['claim_name']}",
                                           f"owner: {owner.slug if owner else 'platform'}"],
                         lambda c=cluster, o=owner, sh=shared, d=d, w=want: source_services.data_source_create(
                             actor=self.actor, name=d["name"], cluster=c, department=o, shared_with=sh, **w))
                continue
            if cur.department_id != (owner.pk if owner else None):
                self.fail((*path, "department"), f"{what} belongs to "
                          f"{cur.department.slug if cur.department else 'the platform'}: its owner cannot change "
                          "(remove it with --prune, or delete it, and declare it again)")
                continue
            old = {k: getattr(cur, k) for k in want}
            old_shared = sorted(cur.shared_with.values_list("slug", flat=True))
            if old != want or old_shared != want_shared:
                self.run(path, "~", what, field_changes({**old, "shared_with": ", ".join(old_shared)},
                                                {**want, "shared_with": ", ".join(want_shared)}),
                         lambda c=cur, sh=shared, w=want: source_services.data_source_update(
                             actor=self.actor, source=c, shared_with=sh, **w))
        if self.prune:
            for source in DataSource.objects.select_related("cluster").order_by("cluster__name", "name"):
                if (source.cluster_id, source.name) not in declared:
                    self.run(("data_sources",), "-", f"data source {source.cluster.name}/{source.name}", [],
                             lambda sc=source: source_services.data_source_delete(actor=self.actor, source=sc))
