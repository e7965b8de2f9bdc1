"""Writing the current lab as a lab file (the format ``lab.services.labfile`` applies)."""

from __future__ import annotations

import re

import yaml
from django.db.models import F

from engine.policy import policy_to_dict
from lab.services.labfile_calendar import calendar_sections
from lab.services.shape import VERSION
from portal.models import Department, Membership, SsoGroupMapping, Team
from quotas.models import (
    ApprovalRule,
    Flavor,
    PreemptionLimit,
    Price,
    Quota,
    QuotaResource,
    RefillRule,
    TeamQuota,
    UserLimit,
    Wallet,
)
from quotas.services import rules
from quotas.services.preemption_limits import limit_values
from scheduling.models import Cluster, JobTemplate, PolicyVersion, TemplateScope
from scheduling.services import cluster_config
from scheduling.services.policy import current_policy
from workloads.models import DataSource, DepartmentSecret


def export_lab() -> dict:
    """The current lab as a lab file's data (see ``dump``)."""
    out: dict = {"version": VERSION}
    out["flavors"] = [
        {"name": f.name, **({"kind": f.kind} if f.is_cpu else {}), "resource_name": f.resource_name,
         "node_labels": dict(f.node_labels or {}),
         "gpu_memory_gib": f.gpu_memory_gib, **({"description": f.description} if f.description else {}),
         **({"sharing": f.sharing} if f.sharing else {}),
         **({"shared_resource_name": f.shared_resource_name, "replicas_per_gpu": f.replicas_per_gpu}
            if f.shared_resource_name or f.replicas_per_gpu else {})}
        for f in Flavor.objects.order_by("name")]
    clusters = []
    for c in Cluster.objects.order_by("name"):
        entry: dict = {"name": c.name, "backend": c.backend}
        if c.is_default:
            entry["default"] = True
        # the settings that differ from a new cluster's (connection settings are references, not secrets)
        fresh, own = cluster_config.cluster_settings(Cluster()), cluster_config.cluster_settings(c)
        entry.update({f: own[f] for f in cluster_config.CLUSTER_SETTINGS if own[f] != fresh[f]})
        groups = cluster_config.node_groups(c)
        if groups and not cluster_config.inventory_owned(c):
            entry["node_groups"] = [_group_entry(n, g) for n, g in sorted(groups.items())]
        clusters.append(entry)
    out["clusters"] = clusters
    # Oversubscription is judged per scope: global quotas against all clusters' GPUs, a cluster's quotas
    # against its own.
    nominal: dict = {}
    for q in Quota.objects.filter(resource=QuotaResource.GPUS).select_related("flavor", "cluster"):
        scope = (q.flavor, q.cluster)
        nominal[scope] = nominal.get(scope, 0) + q.nominal
    over = {(f.pk, c.pk if c else None) for (f, c), n in nominal.items() if n > rules.flavor_capacity(f, c)}
    depts = []
    for d in Department.objects.order_by("slug"):
        entry = {"slug": d.slug, "name": d.name}
        if d.is_archived:
            entry["archived"] = True
        entry["members"] = [
            {"user": m.user.username, **({"email": m.user.email} if m.user.email else {}), "role": m.role,
             "tier": m.user_tier}
            for m in Membership.objects.filter(department=d).select_related("user").order_by("user__username")]
        quotas = {}
        for q in Quota.objects.filter(department=d).select_related("flavor", "cluster").order_by("id"):
            row = {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit,
                   **({"oversubscribe": True} if q.resource == QuotaResource.GPUS
                      and (q.flavor_id, q.cluster_id) in over else {})}
            if q.resource == QuotaResource.GPUS:
                quotas[q.key] = row
            else:  # a CPU pool's cores and GiB, side by side under the pool's key
                quotas.setdefault(q.key, {})[CPU_QUOTA_KEY[q.resource]] = row
        if quotas:
            entry["quotas"] = quotas
        wallet = Wallet.objects.filter(department=d).first()
        refill = RefillRule.objects.filter(department=d).first()
        if wallet is not None or refill is not None:
            budget: dict = {"balance": wallet.balance if wallet else 0}
            if refill is not None:
                budget["refill"] = {"mode": refill.mode, "amount": refill.amount, "period": refill.period,
                                    "active": refill.active}
            entry["budget"] = budget
        rule = ApprovalRule.objects.filter(department=d).first()
        if rule is not None:
            entry["approval_rule"] = {"gpus_above": rule.gpus_above, "cost_above": rule.cost_above,
                                      "realtime": rule.realtime}
        limits = [{**({"user": x.user.username} if x.user_id else {}), "max_gpus": x.max_gpus,
                   **({"max_queued": x.max_queued} if x.max_queued is not None else {})}
                  for x in UserLimit.objects.filter(department=d).select_related("user").order_by(
                      F("user__username").asc(nulls_first=True))]
        if limits:
            entry["user_limits"] = limits
        teams = [_team_entry(t) for t in Team.objects.filter(department=d).order_by("slug")]
        if teams:
            entry["teams"] = teams
        depts.append(entry)
    out["departments"] = depts
    prices: dict = {}
    for p in Price.objects.select_related("flavor").order_by("flavor__name", "tier"):
        prices.setdefault(p.flavor.name, {})[p.tier] = (
            {"per_core_hour": p.per_core_hour, "per_gib_hour": p.per_gib_hour} if p.flavor.is_cpu else p.per_gpu_hour)
    out["prices"] = prices
    limits = [_limit_entry(x) for x in PreemptionLimit.objects.select_related("department").order_by(
        F("department__slug").asc(nulls_first=True), "tier")]
    if limits:
        out["preemption_limits"] = limits
    mappings = [{"group": m.group, "department": m.department.slug, "role": m.role, "tier": m.user_tier}
                for m in SsoGroupMapping.objects.select_related("department").order_by("id")]
    if mappings:
        out["sso"] = {"groups": mappings}
    out.update(_workload_sections())
    out.update(calendar_sections())
    if PolicyVersion.objects.exists():
        doc = policy_to_dict(current_policy()[0])
        doc.pop("version", None)
        out["policy"] = doc
    return out


# A CPU pool's quota rows under its key in the file (the file counts cores and GiB, the rows cpu and memory).
CPU_QUOTA_KEY = {QuotaResource.CPU: "cores", QuotaResource.MEMORY: "memory_gib"}


def _team_entry(team: Team) -> dict:
    entry: dict = {"slug": team.slug}
    if team.name and team.name != team.slug:
        entry["name"] = team.name
    if team.budget_share_pct is not None:
        entry["budget_share_pct"] = team.budget_share_pct
    quotas = {q.flavor.name: {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit,
                              "lending_limit": q.lending_limit}
              for q in TeamQuota.objects.filter(team=team).select_related("flavor").order_by("flavor__name")}
    if quotas:
        entry["quotas"] = quotas
    members = [{"user": m.user.username, **({"admin": True} if m.team_admin else {})}
               for m in team.members.select_related("user").order_by("user__username")]
    if members:
        entry["members"] = members
    return entry


def _group_entry(name: str, g: dict) -> dict:
    """A node group as the file declares it: a CPU pool's sized in whole cores and GiB, without GPUs."""
    if "cpu_millicores" not in g:
        return {"name": name, **g}
    gpus = {"gpus_per_node": g["gpus_per_node"]} if g["gpus_per_node"] else {}  # (a GPU group's own size)
    return {"name": name, "flavor": g["flavor"], "nodes": g["nodes"], **gpus, "cores": g["cpu_millicores"] // 1000,
            "memory_gib": g["memory_mib"] // 1024, "labels": g["labels"]}


def _workload_sections() -> dict:
    """What jobs run with, as the lab declares it: department templates (personal ones are their owners', not
    the lab's), department secrets (never a value) and data sources; a section without entries is left out."""
    out: dict = {}
    templates = [{"department": t.department.slug, "name": t.name,
                  **({"description": t.description} if t.description else {}), "spec": t.spec}
                 for t in JobTemplate.objects.filter(scope=TemplateScope.DEPARTMENT).select_related("department")
                 .order_by("department__slug", "name")]
    if templates:
        out["templates"] = templates
    secrets = [_secret_entry(sc) for sc in DepartmentSecret.objects.select_related("department").order_by(
        "department__slug", "name")]
    if secrets:
        out["secrets"] = secrets
    sources = [_source_entry(ds) for ds in DataSource.objects.select_related("cluster", "department")
               .prefetch_related("shared_with").order_by("cluster__name", "name")]
    if sources:
        out["data_sources"] = sources
    return out


def _limit_entry(limit: PreemptionLimit) -> dict:
    """A preemption limit as the file declares it: its department (none: lab-wide), its tier, every value (a
    value left out of the file is the default, so writing them all keeps a re-apply exact)."""
    return {**({"department": limit.department.slug} if limit.department_id else {}), "tier": limit.tier,
            **limit_values(limit)}


def secret_env_name(department: str, name: str, key: str) -> str:
    """The environment variable an exported value secret names for one of its keys."""
    return re.sub(r"[^A-Z0-9_]", "_", f"SECRET_{department}_{name}_{key}".upper())


def _secret_entry(sc: DepartmentSecret) -> dict:
    """A department secret without its values: a value is named by an environment variable that ``lab apply``
    reads it from (the export never decrypts anything)."""
    entry: dict = {"department": sc.department.slug, "name": sc.name, "kind": sc.kind}
    if sc.purpose != "env":
        entry["purpose"] = sc.purpose
    if sc.kind == "reference":
        entry["reference_name"] = sc.reference_name
        if sc.keys:
            entry["keys"] = list(sc.keys)
    elif sc.purpose == "image-pull":
        entry.update(registry=sc.registry, username=sc.username,
                     password_env=secret_env_name(sc.department.slug, sc.name, "password"))
    else:
        entry["values_env"] = {k: secret_env_name(sc.department.slug, sc.name, k) for k in sc.keys}
    return entry


def _source_entry(ds: DataSource) -> dict:
    """A data source as the file declares it: the fields that differ from a new source's defaults."""
    entry: dict = {"name": ds.name, "cluster": ds.cluster.name, "kind": ds.kind}
    if ds.department is not None:
        entry["department"] = ds.department.slug
    shared = sorted(d.slug for d in ds.shared_with.all())
    if shared:
        entry["shared_with"] = shared
    if ds.shared_with_all:
        entry["shared_with_all"] = True
    entry["claim_name"] = ds.claim_name
    if ds.writable:
        entry["writable"] = True
    entry.update({k: getattr(ds, k) for k in ("sub_path", "description") if getattr(ds, k)})
    return entry


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
