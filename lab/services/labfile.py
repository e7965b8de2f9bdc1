"""The lab as code: a YAML file that declares the lab (docs/lab-as-code.md), applied and exported.

``apply_lab(text, ...)`` reads the file, checks its shape (every error, with its line), then computes and
applies the difference to the database through the services that own each row (the same validation and the
same audit entries as the pages and the API), all in ONE transaction: any error, or ``dry_run``, rolls
everything back, so nothing is ever half-applied. Each change runs in its own savepoint, so one refused
change does not hide the next one's error: every error of the file is reported together.

Idempotent: applying the same file twice changes nothing the second time (and says so). Without ``prune``
what the file does not mention is left alone; with it, it is removed (departments are archived, never
deleted: their history stays).

``export_lab()`` writes the current lab in the same format; exporting, applying that to an empty database
and exporting again gives the same file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from engine import tiers as tier_table
from engine.policy import policy_from_dict, policy_to_dict
from lab.services import departments as dept_services
from lab.services import members as member_services
from lab.services.diffs import field_changes, flat_changes, shown
from lab.services.export import CPU_QUOTA_KEY, dump, export_lab
from lab.services.labfile_calendar import CalendarSections
from lab.services.labfile_workloads import WorkloadSections
from lab.services.shape import (
    CPU_PRICE_KEYS,
    CPU_QUOTA_KEYS,
    LabError,
    LabFileInvalid,
    check_shape,
    decode,
    line_of,
    load,
)
from portal.errors import PortalError, ValidationFailed
from portal.models import Department, Membership, Role, SsoGroupMapping, Team, UserTier
from portal.services import sso as sso_services
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
from quotas.services import flavors as flavor_services
from quotas.services import preemption_limits as limit_services
from quotas.services import pricing, rules, user_limits, wallets
from quotas.services import teams as team_services
from scheduling.models import Cluster
from scheduling.services import cluster_config
from scheduling.services.policy import current_policy, policy_update

__all__ = ["LabError", "LabFileInvalid", "Result", "apply_lab", "dump", "export_lab"]

# ------------------------------------------------------------------------------------------ apply


@dataclass
class Result:
    created: int = 0
    changed: int = 0
    removed: int = 0
    lines: list[str] = field(default_factory=list)
    errors: list[LabError] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.created or self.changed or self.removed)


class _Applier(WorkloadSections, CalendarSections):
    def __init__(self, data: dict, lines: dict, *, actor, prune: bool):
        self.data, self.lines, self.actor, self.prune = data, lines, actor, prune
        self.r = Result()

    # Every change runs in a savepoint: a refused one is rolled back alone and reported, and the next one
    # is still tried, so the file's every error is listed. The whole apply is rolled back at the end.
    def run(self, path: tuple, sign: str, what: str, details: list[str], fn) -> bool:
        try:
            with transaction.atomic():
                fn()
        except PortalError as exc:
            self._error(path, exc)
            return False
        except ValidationError as exc:
            self.r.errors.append(LabError(path, " ".join(exc.messages), line_of(self.lines, path)))
            return False
        if sign == "+":
            self.r.created += 1
        elif sign == "~":
            self.r.changed += 1
        else:
            self.r.removed += 1
        detail = f" ({', '.join(details)})" if sign != "~" and details else (
            ": " + "; ".join(details) if details else "")
        self.r.lines.append(f"{sign} {what}{detail}")
        return True

    def _error(self, path: tuple, exc: PortalError) -> None:
        if exc.fields:
            for f, items in exc.fields.items():
                for i in items:
                    self.r.errors.append(LabError((*path, f) if f not in ("non_field_errors",) else path,
                                                  i["message"], line_of(self.lines, (*path, f))))
        else:
            self.r.errors.append(LabError(path, exc.message, line_of(self.lines, path)))

    def fail(self, path: tuple, message: str) -> None:
        self.r.errors.append(LabError(path, message, line_of(self.lines, path)))

    # ---------------------------------------------------------------- flavors
    def flavors(self):
        for i, f in enumerate(self.data.get("flavors") or []):
            path = ("flavors", i)
            want = {"resource_name": f.get("resource_name", "nvidia.com/gpu"),
                    "node_labels": {str(k): str(v) for k, v in (f.get("node_labels") or {}).items()},
                    "gpu_memory_gib": f.get("gpu_memory_gib", 0), "description": f.get("description", ""),
                    "sharing": f.get("sharing", ""), "shared_resource_name": f.get("shared_resource_name", ""),
                    "replicas_per_gpu": f.get("replicas_per_gpu", 0)}
            kind = f.get("kind", "gpu")
            cur = Flavor.objects.filter(name=f["name"]).first()
            if cur is None:
                self.run(path, "+", f"flavor {f['name']}",
                         [f"resource: {want['resource_name']}"] + (["kind: cpu"] if kind == "cpu" else []),
                         lambda f=f, w=want, k=kind: flavor_services.flavor_create(actor=self.actor, name=f["name"],
                                                                                   kind=k, **w))
            else:
                if cur.kind != kind:
                    # Its quotas, prices and jobs count GPUs or cores: a flavor keeps the kind it was made with.
                    self.fail((*path, "kind"), f"{f['name']} is a {cur.kind} flavor: a flavor's kind does not "
                                               "change (declare a new flavor)")
                    continue
                old = {k: getattr(cur, k) for k in want}
                if old != want:
                    self.run(path, "~", f"flavor {f['name']}", field_changes(old, want),
                             lambda c=cur, w=want: flavor_services.flavor_update(flavor=c, actor=self.actor, **w))

    # ---------------------------------------------------------------- clusters
    def clusters(self):
        for i, c in enumerate(self.data.get("clusters") or []):
            path = ("clusters", i)
            want = {"backend": c.get("backend", "simulated"), "is_default": bool(c.get("default", False))}
            # The other settings are applied where the file states them; left out, they stay as they are (a
            # cluster an admin drained from the page is not reopened by the next apply).
            want.update({f: c[f] for f in cluster_config.CLUSTER_SETTINGS if f in c})
            cur = Cluster.objects.filter(name=c["name"]).first()
            if cur is None:
                self.run(path, "+", f"cluster {c['name']}", field_changes({}, want),
                         lambda c=c, w=want: cluster_config.cluster_create(actor=self.actor, name=c["name"], **w))
            else:
                settings = cluster_config.cluster_settings(cur)
                old = {k: settings[k] if k in settings else getattr(cur, k) for k in want}
                if old != want and (any(old[k] != want[k] for k in want if k != "is_default") or want["is_default"]):
                    w = {k: v for k, v in want.items() if old[k] != v}
                    self.run(path, "~", f"cluster {c['name']}", field_changes(old, want),
                             lambda cur=cur, w=w: cluster_config.cluster_update(cluster=cur, actor=self.actor, **w))
            cluster = Cluster.objects.filter(name=c["name"]).first()
            if cluster is None:
                continue
            current = cluster_config.node_groups(cluster)
            declared = set()
            for j, g in enumerate(c.get("node_groups") or []):
                gpath = (*path, "node_groups", j)
                declared.add(g["name"])
                flavor = Flavor.objects.filter(name=g["flavor"]).first()
                if flavor is None:
                    self.fail((*gpath, "flavor"), f"no flavor {g['flavor']} (declare it under flavors:)")
                    continue
                labels = {str(k): str(v) for k, v in (g.get("labels") or flavor.node_labels or {}).items()}
                want_g = {"flavor": flavor.name, "nodes": g["nodes"], "gpus_per_node": g.get("gpus_per_node", 0),
                          "labels": labels}
                if flavor.is_cpu or "cores" in g:  # a CPU pool's nodes are sized in cores and memory (a GPU
                    # group's may say theirs, for CPU work on GPU nodes)
                    want_g.update(cpu_millicores=g.get("cores", 0) * 1000, memory_mib=g.get("memory_gib", 0) * 1024)
                old_g = current.get(g["name"])
                if old_g == want_g:
                    continue
                self.run(gpath, "+" if old_g is None else "~", f"node group {c['name']}/{g['name']}",
                         field_changes(old_g or {}, want_g),
                         lambda cl=cluster, g=g, fl=flavor, lb=labels, w=want_g: cluster_config.node_group_set(
                             cluster=cl, actor=self.actor, name=g["name"], flavor=fl, nodes=g["nodes"],
                             gpus_per_node=w["gpus_per_node"], labels=lb, cpu_millicores=w.get("cpu_millicores", 0),
                             memory_mib=w.get("memory_mib", 0)))
            if self.prune and not cluster_config.inventory_owned(cluster):
                for name in sorted(set(current) - declared):
                    self.run(path, "-", f"node group {c['name']}/{name}", [],
                             lambda cl=cluster, n=name: cluster_config.node_group_delete(cluster=cl, actor=self.actor,
                                                                                     name=n))

    # ---------------------------------------------------------------- departments and members
    def departments(self):
        User = get_user_model()
        for i, d in enumerate(self.data.get("departments") or []):
            path = ("departments", i)
            cur = Department.objects.filter(slug=d["slug"]).first()
            if cur is None:
                ok = self.run(path, "+", f"department {d['slug']}", [f"name: {d['name']}"],
                              lambda d=d: dept_services.department_create(actor=self.actor, slug=d["slug"],
                                                                          name=d["name"]))
                if not ok:
                    continue
                cur = Department.objects.get(slug=d["slug"])
            else:
                if cur.name != d["name"]:
                    self.run(path, "~", f"department {d['slug']}", field_changes({"name": cur.name}, {"name": d["name"]}),
                             lambda c=cur, d=d: dept_services.department_rename(department=c, actor=self.actor,
                                                                                name=d["name"]))
                if cur.is_archived and not d.get("archived", False):
                    self.run(path, "~", f"department {d['slug']}", ["archived: true -> false"],
                             lambda c=cur: dept_services.department_restore(department=c, actor=self.actor,
                                                                            reason="lab file"))
                    cur.refresh_from_db()
            declared = set()
            for j, m in enumerate(d.get("members") or []):
                mpath = (*path, "members", j)
                username = m["user"]
                declared.add(username)
                want = {"role": m.get("role", Role.RESEARCHER), "user_tier": m.get("tier", UserTier.STANDARD)}
                existing = Membership.objects.select_related("department", "user").filter(
                    user__username=username).first()
                user = User.objects.filter(username=username).first()
                if user is not None and m.get("email") is not None and user.email != m["email"]:
                    self.run(mpath, "~", f"user {username}", field_changes({"email": user.email}, {"email": m["email"]}),
                             lambda u=user, e=m["email"]: _set_email(u, e))
                if existing is not None and existing.department_id == cur.pk:
                    old = {"role": existing.role, "user_tier": existing.user_tier}
                    if old != want:
                        self.run(mpath, "~", f"member {d['slug']}/{username}", field_changes(old, want),
                                 lambda e=existing, w=want: member_services.member_change(
                                     membership=e, actor=self.actor, **w))
                    continue
                if existing is not None:  # moves from another department
                    self.run(mpath, "~", f"member {username}",
                             [f"department: {existing.department.slug} -> {d['slug']}"],
                             lambda e=existing, c=cur, w=want, m=m: _move(e, c, self.actor, w, m))
                    continue
                details = [f"role: {want['role']}", f"tier: {want['user_tier']}"] + ([] if user else ["new account"])
                self.run(mpath, "+", f"member {d['slug']}/{username}", details,
                         lambda c=cur, w=want, m=m: _add(c, self.actor, w, m))
            if self.prune:
                for extra in Membership.objects.filter(department=cur).exclude(
                        user__username__in=declared).select_related("user", "department"):
                    self.run(path, "-", f"member {d['slug']}/{extra.user.username}", [],
                             lambda e=extra: member_services.member_remove(membership=e, actor=None,
                                                                           comment="pruned by the lab file"))

    # ---------------------------------------------------------------- quotas
    def quotas(self):
        changes = []
        for i, d in enumerate(self.data.get("departments") or []):
            dept = Department.objects.filter(slug=d["slug"]).first()
            if dept is None:
                continue
            declared = set()
            for key, q, resource, path in _quota_rows(i, d.get("quotas") or {}):
                declared.add((key, resource))
                # ``flavor@cluster``: a quota on that cluster only; ``flavor``: on all clusters.
                fname, at, cname = key.partition("@")
                flavor = Flavor.objects.filter(name=fname).first()
                if flavor is None:
                    self.fail(path, f"no flavor {fname} (declare it under flavors:)")
                    continue
                cluster = Cluster.objects.filter(name=cname).first() if at else None
                if at and cluster is None:
                    self.fail(path, f"no cluster {cname!r} (declare it under clusters:)")
                    continue
                if (resource == QuotaResource.GPUS) == flavor.is_cpu:
                    self.fail(path, f"{fname} is a CPU pool: its quota is {{cores: {{nominal: ...}}, memory_gib: "
                                    "{nominal: ...}}" if flavor.is_cpu else f"{fname} is a GPU flavor: its quota "
                                    "counts GPUs ({nominal: ...}), not cores or memory_gib")
                    continue
                want = {"nominal": q["nominal"], "borrowing_limit": q.get("borrowing_limit"),
                        "lending_limit": q.get("lending_limit")}
                cur = Quota.objects.filter(department=dept, flavor=flavor, cluster=cluster, resource=resource).first()
                over = bool(q.get("oversubscribe", False))
                what = f"quota {d['slug']}/{key}" + ("" if resource == QuotaResource.GPUS else f" {path[-1]}")
                if cur is None:
                    changes.append((want["nominal"], path, "+", what, field_changes({}, want),
                                    lambda dp=dept, fl=flavor, cl=cluster, w=want, o=over, r=resource:
                                    rules.quota_create(department=dp, flavor=fl, cluster=cl, actor=self.actor,
                                                       oversubscribe=o, comment="lab file", resource=r, **w)))
                else:
                    old = {k: getattr(cur, k) for k in want}
                    if old != want:
                        changes.append((want["nominal"] - cur.nominal, path, "~", what,
                                        field_changes(old, want),
                                        lambda c=cur, w=want, o=over: rules.quota_set(
                                            quota=c, actor=self.actor, oversubscribe=o, comment="lab file", **w)))
            if self.prune:
                for q in Quota.objects.filter(department=dept).select_related("flavor", "cluster", "department"):
                    if (q.key, q.resource) in declared:
                        continue
                    changes.append((-q.nominal, ("departments", i, "quotas"), "-",
                                    f"quota {d['slug']}/{q.key}" + (
                                        "" if q.resource == QuotaResource.GPUS else f" {CPU_QUOTA_KEY[q.resource]}"), [],
                                    lambda q=q: rules.quota_delete(quota=q, actor=self.actor,
                                                                   comment="pruned by the lab file")))
        # Decreases first: GPUs moved from one department to another never count twice on the way.
        for _, path, sign, what, details, fn in sorted(changes, key=lambda c: c[0]):
            self.run(path, sign, what, details, fn)

    # ---------------------------------------------------------------- teams
    def teams(self):
        """Each department's ``teams:``, after its members and quotas (a split is checked against the
        department's quota): the teams, their quota splits (decreases first, so GPUs moved from one team to
        another never count twice on the way) and their members. With ``prune`` the teams, splits and team
        memberships the file leaves out go."""
        changes, placed = [], []
        for i, d in enumerate(self.data.get("departments") or []):
            dept = Department.objects.filter(slug=d["slug"]).first()
            if dept is None or (d.get("teams") is None and not self.prune):
                continue
            declared = set()
            for j, t in enumerate(d.get("teams") or []):
                path = ("departments", i, "teams", j)
                declared.add(t["slug"])
                want = {"name": t.get("name") or t["slug"], "budget_share_pct": t.get("budget_share_pct")}
                team = Team.objects.filter(department=dept, slug=t["slug"]).first()
                what = f"team {d['slug']}/{t['slug']}"
                if team is None:
                    if not self.run(path, "+", what, field_changes({}, want),
                                    lambda dp=dept, t=t, w=want: team_services.team_create(
                                        department=dp, slug=t["slug"], actor=self.actor, **w)):
                        continue
                    team = Team.objects.get(department=dept, slug=t["slug"])
                else:
                    old = {"name": team.name, "budget_share_pct": team.budget_share_pct}
                    if old != want:
                        self.run(path, "~", what, field_changes(old, want),
                                 lambda tm=team, w=want: team_services.team_update(team=tm, actor=self.actor, **w))
                split = set()
                for fname, q in (t.get("quotas") or {}).items():
                    qpath = (*path, "quotas", fname)
                    flavor = Flavor.objects.filter(name=fname).first()
                    if flavor is None:
                        self.fail(qpath, f"no flavor {fname} (declare it under flavors:)")
                        continue
                    split.add(flavor.pk)
                    wq = {"nominal": q["nominal"], "borrowing_limit": q.get("borrowing_limit"),
                          "lending_limit": q.get("lending_limit")}
                    cur = TeamQuota.objects.filter(team=team, flavor=flavor).first()
                    oq = None if cur is None else {k: getattr(cur, k) for k in wq}
                    if oq != wq:
                        changes.append((wq["nominal"] - (cur.nominal if cur else 0), qpath, "+" if cur is None else "~",
                                        f"team quota {d['slug']}/{t['slug']}/{fname}", field_changes(oq or {}, wq),
                                        lambda tm=team, fl=flavor, w=wq: team_services.team_quota_set(
                                            team=tm, flavor=fl, actor=self.actor, check_role=False, **w)))
                if self.prune:
                    for cur in TeamQuota.objects.filter(team=team).exclude(flavor_id__in=split).select_related("flavor"):
                        changes.append((-cur.nominal, (*path, "quotas"), "-",
                                        f"team quota {d['slug']}/{t['slug']}/{cur.flavor.name}", [],
                                        lambda tm=team, fl=cur.flavor: team_services.team_quota_delete(
                                            team=tm, flavor=fl, actor=self.actor)))
                placed.append((dept, team, d, path, t.get("members")))
            if self.prune:
                for extra in Team.objects.filter(department=dept).exclude(slug__in=declared):
                    self.run(("departments", i, "teams"), "-", f"team {d['slug']}/{extra.slug}", [],
                             lambda tm=extra: team_services.team_delete(team=tm, actor=self.actor))
        for _, path, sign, what, details, fn in sorted(changes, key=lambda c: c[0]):
            self.run(path, sign, what, details, fn)
        for dept, team, d, path, members in placed:
            listed = set()
            for k, m in enumerate(members or []):
                mpath = (*path, "members", k)
                listed.add(m["user"])
                cur = Membership.objects.select_related("user", "department", "team").filter(
                    user__username=m["user"], department=dept).first()
                if cur is None:
                    self.fail((*mpath, "user"), f"{m['user']} is not a member of {d['slug']} (declare them under "
                                                "its members:)")
                    continue
                want = {"team": team.slug, "team_admin": bool(m.get("admin", False))}
                old = {"team": cur.team.slug if cur.team_id else None, "team_admin": cur.team_admin}
                if old != want:
                    self.run(mpath, "+" if cur.team_id is None else "~", f"team member {d['slug']}/{team.slug}/{m['user']}",
                             field_changes(old, want), lambda c=cur, tm=team, w=want: team_services.member_set_team(
                                 membership=c, team=tm, team_admin=w["team_admin"], actor=self.actor))
            if self.prune:
                for extra in Membership.objects.filter(team=team).exclude(user__username__in=listed).select_related(
                        "user", "department", "team"):
                    self.run((*path, "members"), "-", f"team member {d['slug']}/{team.slug}/{extra.user.username}", [],
                             lambda c=extra: team_services.member_set_team(membership=c, team=None, actor=self.actor))

    # ---------------------------------------------------------------- per-user limits
    def user_limits(self):
        """Each department's ``user_limits:`` (a row without ``user`` is every member's), after its members
        and quotas (a limit is checked against them); with ``prune`` the rows the file leaves out go."""
        User = get_user_model()
        for i, d in enumerate(self.data.get("departments") or []):
            dept = Department.objects.filter(slug=d["slug"]).first()
            if dept is None or (d.get("user_limits") is None and not self.prune):
                continue
            current = {x.user.username if x.user_id else None: x
                       for x in UserLimit.objects.filter(department=dept).select_related("user")}
            declared: set = set()
            for j, row in enumerate(d.get("user_limits") or []):
                path, name = ("departments", i, "user_limits", j), row.get("user")
                if name is None and None in declared:
                    self.fail(path, "the department's limit (a row without user) is declared twice")
                    continue
                declared.add(name)
                want = {"max_gpus": row["max_gpus"], "max_queued": row.get("max_queued")}
                cur = current.get(name)
                old = None if cur is None else {"max_gpus": cur.max_gpus, "max_queued": cur.max_queued}
                user = None if name is None else User.objects.filter(username=name).first()
                if old == want:
                    continue
                if name is not None and user is None:
                    self.fail((*path, "user"), f"{name} is not a member of {d['slug']} (declare them under members:)")
                    continue
                self.run(path, "+" if cur is None else "~", f"user limit {d['slug']}/{name or '(every member)'}",
                         field_changes(old or {}, want), lambda dp=dept, u=user, w=want: user_limits.user_limit_set(
                             department=dp, user=u, actor=self.actor, **w))
            for name, cur in sorted(current.items(), key=lambda kv: kv[0] or "") if self.prune else ():
                if name not in declared:
                    self.run(("departments", i, "user_limits"), "-", f"user limit {d['slug']}/{name or '(every member)'}",
                             [], lambda dp=dept, u=cur.user: user_limits.user_limit_delete(
                                 department=dp, user=u, actor=self.actor, comment="pruned by the lab file"))

    # ---------------------------------------------------------------- prices, budgets, approval rules
    def prices(self):
        declared = set()
        for fname, tiers in (self.data.get("prices") or {}).items():
            flavor = Flavor.objects.filter(name=fname).first()
            if flavor is None:
                self.fail(("prices", fname), f"no flavor {fname} (declare it under flavors:)")
                continue
            if any(isinstance(p, dict) != flavor.is_cpu for p in tiers.values()):
                self.fail(("prices", fname), f"{fname} is a CPU pool: {{tier: {{per_core_hour: ..., per_gib_hour: "
                                             "...}}}" if flavor.is_cpu else f"{fname} is a GPU flavor: {{tier: mcr "
                                             "per GPU-hour}")
                continue
            if flavor.is_cpu:
                self.cpu_prices(fname, flavor, tiers, declared)
                continue
            current = dict(Price.objects.filter(flavor=flavor).values_list("tier", "per_gpu_hour"))
            steps = []
            for tier, price in tiers.items():
                declared.add((fname, tier))
                old = current.get(tier)
                if old == price:
                    continue
                up = old is None or price > old
                # A premium tier (realtime) must stay dearer at every step: raise it and lower the others first.
                premium = tier_table.is_premium(tier)
                first = premium == up
                steps.append((0 if first else 1, 0 if premium else 1, tier, price, old))
            for _, _, tier, price, old in sorted(steps):
                self.run(("prices", fname, tier), "+" if old is None else "~", f"price {fname}/{tier}",
                         [f"per_gpu_hour: {shown(old)} -> {price}"] if old is not None else [f"{price} mcr/GPU-h"],
                         lambda fl=flavor, t=tier, p=price: pricing.price_set(flavor=fl, tier=t, per_gpu_hour=p,
                                                                             actor=self.actor))
        if self.prune:
            for p in Price.objects.select_related("flavor").order_by("flavor__name", "tier"):
                if (p.flavor.name, p.tier) not in declared:
                    self.run(("prices",), "-", f"price {p.flavor.name}/{p.tier}", [],
                             lambda p=p: pricing.price_delete(price=p, actor=self.actor))

    def cpu_prices(self, fname: str, flavor, tiers: dict, declared: set) -> None:
        """A CPU pool's prices per core-hour and GiB-hour (its ``per_gpu_hour`` stays 0, so the realtime-dearer
        rule, which reads GPU prices, does not apply to them)."""
        current = {p.tier: {k: getattr(p, k) for k in CPU_PRICE_KEYS} for p in Price.objects.filter(flavor=flavor)}
        for tier, want in tiers.items():
            declared.add((fname, tier))
            old = current.get(tier)
            if old == want:
                continue
            self.run(("prices", fname, tier), "+" if old is None else "~", f"price {fname}/{tier}",
                     field_changes(old or {}, want),
                     lambda fl=flavor, t=tier, w=want: pricing.price_set(flavor=fl, tier=t, per_gpu_hour=0,
                                                                        actor=self.actor, **w))

    def budgets(self):
        for i, d in enumerate(self.data.get("departments") or []):
            dept = Department.objects.filter(slug=d["slug"]).first()
            if dept is None:
                continue
            path = ("departments", i)
            budget = d.get("budget")
            if budget is not None:
                if not Wallet.objects.filter(department=dept).exists():
                    # The balance is the opening one: afterwards the ledger moves it (refills, jobs).
                    self.run((*path, "budget"), "+", f"wallet {d['slug']}",
                             [f"balance: {budget.get('balance', 0)} mcr"],
                             lambda dp=dept, b=budget: wallets.wallet_create(department=dp, actor=self.actor,
                                                                            balance=b.get("balance", 0)))
                refill = budget.get("refill")
                cur = RefillRule.objects.filter(department=dept).first()
                if refill is not None:
                    want = {"mode": refill.get("mode", "fixed"), "amount": refill["amount"],
                            "period": refill.get("period", "monthly"), "active": refill.get("active", True)}
                    old = {k: getattr(cur, k) for k in want} if cur else None
                    if old != want:
                        self.run((*path, "budget", "refill"), "+" if cur is None else "~", f"refill rule {d['slug']}",
                                 field_changes(old or {}, want),
                                 lambda dp=dept, w=want: rules.refill_rule_set(department=dp, actor=self.actor, **w))
                elif cur is not None and self.prune:
                    self.run(path, "-", f"refill rule {d['slug']}", [],
                             lambda dp=dept: rules.refill_rule_delete(department=dp, actor=self.actor))
            rule = d.get("approval_rule")
            cur_rule = ApprovalRule.objects.filter(department=dept).first()
            if rule is not None or (self.prune and cur_rule is not None):
                want = {"gpus_above": (rule or {}).get("gpus_above"), "cost_above": (rule or {}).get("cost_above"),
                        "realtime": (rule or {}).get("realtime", False)}
                old = {k: getattr(cur_rule, k) for k in want} if cur_rule else None
                if old != want and not (old is None and want == {"gpus_above": None, "cost_above": None,
                                                                  "realtime": False}):
                    self.run((*path, "approval_rule"), "+" if cur_rule is None else "~",
                             f"approval rule {d['slug']}", field_changes(old or {}, want),
                             lambda dp=dept, w=want: rules.approval_rule_set(department=dp, actor=self.actor, **w))

    # ---------------------------------------------------------------- policy, archives, prune
    def policy(self):
        doc = self.data.get("policy")
        if doc is None:
            return
        want = policy_to_dict(policy_from_dict({k: v for k, v in doc.items() if k != "version"}))
        cur, version = current_policy()
        old = policy_to_dict(cur)
        want.pop("version", None)
        old.pop("version", None)
        if want != old:
            self.run(("policy",), "~", "policy", [f"v{version} -> v{version + 1}"] + flat_changes(old, want),
                     lambda: policy_update(user=self.actor, data=want, comment="lab file"))

    def preemption_limits(self):
        """The ``preemption_limits:`` rows by (department, tier) (no department: the lab-wide one), after the
        departments they name; a field left out takes its default, as a new row would. With ``prune`` the rows
        the file leaves out go (the section left out: all of them)."""
        rows = self.data.get("preemption_limits")
        if rows is None and not self.prune:
            return
        current = {(x.department.slug if x.department_id else None, x.tier): x
                   for x in PreemptionLimit.objects.select_related("department")}
        declared: set = set()
        for i, row in enumerate(rows or []):
            path, slug = ("preemption_limits", i), row.get("department")
            dept = Department.objects.filter(slug=slug).first() if slug else None
            if slug and dept is None:
                continue  # its department failed to be created: that error is reported already
            key = (slug, row["tier"])
            declared.add(key)
            want = {f: row.get(f, default) for f, default in limit_services.limit_defaults().items()}
            old = limit_services.limit_values(current.get(key))
            if old == want:
                continue
            self.run(path, "+" if old is None else "~", f"preemption limit {slug or '(lab-wide)'}/{row['tier']}",
                     field_changes(old or {}, want), lambda dp=dept, t=row["tier"], w=want: limit_services.preemption_limit_set(
                         department=dp, tier=t, actor=self.actor, **w))
        for key, cur in sorted(current.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])) if self.prune else ():
            if key not in declared:
                self.run(("preemption_limits",), "-", f"preemption limit {key[0] or '(lab-wide)'}/{key[1]}", [],
                         lambda c=cur: limit_services.preemption_limit_delete(
                             department=c.department, tier=c.tier, actor=self.actor,
                             comment="pruned by the lab file"))

    def sso(self):
        groups = (self.data.get("sso") or {}).get("groups")
        if groups is None:
            return
        declared = set()
        for i, g in enumerate(groups):
            path = ("sso", "groups", i)
            dept = Department.objects.filter(slug=g["department"]).first()
            if dept is None:
                continue  # its department failed to be created: that error is reported already
            want = {"role": g.get("role", Role.RESEARCHER), "user_tier": g.get("tier", UserTier.STANDARD)}
            declared.add((g["group"], dept.pk))
            cur = SsoGroupMapping.objects.filter(group=g["group"], department=dept).first()
            old = {"role": cur.role, "user_tier": cur.user_tier} if cur else None
            if old != want:
                self.run(path, "+" if cur is None else "~", f"sso group {g['group']} -> {dept.slug}",
                         field_changes(old or {}, want),
                         lambda gr=g["group"], dp=dept, w=want: sso_services.sso_mapping_set(
                             actor=self.actor, group=gr, department=dp, **w))
        if self.prune:
            for m in SsoGroupMapping.objects.select_related("department"):
                if (m.group, m.department_id) not in declared:
                    self.run(("sso", "groups"), "-", f"sso group {m.group} -> {m.department.slug}", [],
                             lambda m=m: sso_services.sso_mapping_delete(mapping=m, actor=self.actor))

    def archives(self):
        declared = set()
        for i, d in enumerate(self.data.get("departments") or []):
            declared.add(d["slug"])
            dept = Department.objects.filter(slug=d["slug"]).first()
            if dept is not None and d.get("archived", False) and not dept.is_archived:
                self._archive(("departments", i, "archived"), dept, "archived by the lab file")
        if self.prune:
            for dept in Department.objects.filter(archived_at__isnull=True).exclude(slug__in=declared):
                self._archive(("departments",), dept, "pruned by the lab file (archived: history kept)")

    def _archive(self, path, dept, reason):
        impact = dept_services.archive_impact(dept)
        self.run(path, "~" if path[-1] == "archived" else "-", f"department {dept.slug}",
                 ["archived: false -> true", f"{impact['waiting_jobs']} waiting job(s) cancelled",
                  f"{impact['active_jobs']} running job(s) run to their end"],
                 lambda: dept_services.department_archive(department=dept, actor=self.actor, reason=reason,
                                                          confirm=True))

    def prune_rest(self):
        if not self.prune:
            return
        clusters = {c["name"] for c in self.data.get("clusters") or []}
        for c in Cluster.objects.exclude(name__in=clusters):
            self.run(("clusters",), "-", f"cluster {c.name}", [],
                     lambda c=c: cluster_config.cluster_delete(cluster=c, actor=self.actor, comment="pruned by the lab file"))
        flavors = {f["name"] for f in self.data.get("flavors") or []}
        for f in Flavor.objects.exclude(name__in=flavors):
            self.run(("flavors",), "-", f"flavor {f.name}", [],
                     lambda f=f: flavor_services.flavor_delete(flavor=f, actor=self.actor,
                                                               comment="pruned by the lab file"))


def _quota_rows(i: int, quotas: dict):
    """(key, q, resource, path) for each quota row a department's ``quotas:`` declares: a GPU flavor's is one
    row of GPUs, a CPU pool's ``{cores: ..., memory_gib: ...}`` one row each."""
    for key, q in quotas.items():
        path = ("departments", i, "quotas", key)
        if set(q) & set(CPU_QUOTA_KEYS):
            for resource, name in CPU_QUOTA_KEY.items():
                if name in q:
                    yield key, q[name], resource, (*path, name)
        else:
            yield key, q, QuotaResource.GPUS, path


def _set_email(user, email: str) -> None:
    user.email = email
    user.save(update_fields=["email"])


def _add(dept, actor, want, m):
    env = m.get("password_env")
    if env and not os.environ.get(env):
        user = get_user_model().objects.filter(username=m["user"]).first()
        if user is None or not user.has_usable_password():
            # The file asked for a local password and none can be set: the account could not sign in (without
            # single sign-on), which nobody would notice until its owner tried. An account that has a password
            # already keeps it, so an exported file applies without the variable, as secrets do.
            raise ValidationFailed(fields={"password_env": [{
                "code": "unset", "message": f"environment variable {env} is not set (or empty): the password of "
                                           "an account without one is read from it"}]})
    membership = member_services.member_add(department=dept, actor=actor, username=m["user"],
                                            email=m.get("email") or "", role=want["role"],
                                            user_tier=want["user_tier"], comment="lab file")
    user = membership.user
    if env and os.environ.get(env) and not user.has_usable_password():
        user.set_password(os.environ[env])  # given by the environment, never written in the file
        user.save(update_fields=["password"])
    return membership


def _move(existing, dept, actor, want, m):
    member_services.member_remove(membership=existing, actor=actor, comment=f"moved to {dept.slug} by the lab file")
    return _add(dept, actor, want, m)


def apply_lab(source: str | bytes, *, actor=None, dry_run: bool = False, prune: bool = False,
              size: int | None = None) -> Result:
    """Apply a lab file (see the module's docstring): its text, or its bytes (strict UTF-8; ``size`` is the
    whole file's when only its start was read). Raises LabFileInvalid with every error, having changed
    nothing; returns what changed (or, with ``dry_run``, what would change)."""
    data, lines = load(decode(source, size=size) if isinstance(source, bytes) else source)
    errors = check_shape(data, lines)
    if errors:
        raise LabFileInvalid(errors)
    a = _Applier(data, lines, actor=actor, prune=prune)
    with transaction.atomic():
        a.flavors()
        a.clusters()
        a.departments()
        a.quotas()
        a.teams()
        a.user_limits()
        a.prices()
        a.budgets()
        a.policy()
        a.preemption_limits()
        a.data_sources()
        a.templates()
        a.sso()
        a.secrets()
        a.calendar()
        a.archives()
        a.prune_rest()
        if a.r.errors or dry_run:
            transaction.set_rollback(True)
    if a.r.errors:
        raise LabFileInvalid(sorted(a.r.errors, key=lambda e: (e.line or 0, str(e.path))))
    return a.r


