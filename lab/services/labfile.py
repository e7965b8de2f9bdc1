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
import re
from dataclasses import dataclass, field

import yaml
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from portal.errors import PortalError
from portal.models import SLUG, Department, Membership, Role, SsoGroupMapping, UserTier, not_reserved
from portal.services import departments as dept_services
from portal.services import members as member_services
from portal.services import sso as sso_services
from quotas.models import FLAVOR_NAME, RESOURCE_NAME, ApprovalRule, Flavor, Price, Quota, RefillRule, Wallet
from quotas.services import flavors as flavor_services
from quotas.services import pricing, rules, wallets
from scheduling.core.policy import PolicyError, policy_from_dict, policy_to_dict
from scheduling.core.types import TIERS
from scheduling.models import Cluster, PolicyVersion
from scheduling.services import inventory
from scheduling.services.policy import current_policy, policy_update

VERSION = 1
REFILL_MODES = ("fixed", "per_nominal_gpu")
PERIODS = ("weekly", "monthly")

# ------------------------------------------------------------------------------------------ errors, lines


@dataclass
class LabError:
    path: tuple
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = ".".join(str(p) for p in self.path) or "(file)"
        return f"line {self.line}: {where}: {self.message}" if self.line else f"{where}: {self.message}"


class LabFileInvalid(Exception):
    """The file was refused; ``errors`` lists every problem found. Nothing was changed."""

    def __init__(self, errors: list[LabError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _node_lines(node, path: tuple, out: dict) -> None:
    """Map every path of the composed YAML to the line it starts on (1-based): the line numbers of errors."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = key.value
            out[(*path, k)] = key.start_mark.line + 1
            _node_lines(value, (*path, k), out)
            out[(*path, k)] = key.start_mark.line + 1  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, (*path, i), out)


def load(text: str) -> tuple[dict, dict]:
    """The file's data and its line map. A syntax error is refused with its line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise LabFileInvalid([LabError((), f"not valid YAML: {exc.problem or exc}",
                                       mark.line + 1 if mark else None)])
    except yaml.YAMLError as exc:
        raise LabFileInvalid([LabError((), f"not valid YAML: {exc}")])
    lines: dict = {}
    if node is not None:
        _node_lines(node, (), lines)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise LabFileInvalid([LabError((), "the lab file must be a mapping (departments:, flavors:, ...)", 1)])
    return data, lines


def _line(lines: dict, path: tuple) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


# ------------------------------------------------------------------------------------------ shape


class _Shape:
    """A tiny schema: checks types, required and unknown keys and value ranges, collecting every error."""

    def __init__(self, lines: dict):
        self.lines = lines
        self.errors: list[LabError] = []

    def err(self, path: tuple, message: str) -> None:
        self.errors.append(LabError(path, message, _line(self.lines, path)))

    def obj(self, value, path: tuple, fields: dict, required: tuple = ()) -> dict:
        if not isinstance(value, dict):
            self.err(path, "must be a mapping")
            return {}
        for k in value:
            if k not in fields:
                self.err((*path, k), f"unknown field (known: {', '.join(fields)})")
        for k in required:
            if value.get(k) is None:
                self.err((*path, k) if k in value else path, f"{k} is required")
        for k, check in fields.items():
            if k in value and check is not None:
                check(value[k], (*path, k))
        return value

    def string(self, value, path, *, choices=None, max_length=200, validators=()):
        if not isinstance(value, str) or not value.strip():
            self.err(path, "must be a non-empty string")
        elif choices and value not in choices:
            self.err(path, f"must be one of {', '.join(choices)}")
        elif len(value) > max_length:
            self.err(path, f"at most {max_length} characters")
        else:
            for check in validators:  # the model's own rules (names, slugs, resource names)
                try:
                    check(value)
                except ValidationError as exc:
                    self.err(path, " ".join(exc.messages))

    def text(self, value, path):
        if not isinstance(value, str):
            self.err(path, "must be a string")

    def integer(self, value, path, *, minimum=0, nullable=False):
        if value is None and nullable:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            self.err(path, "must be a whole number" + (" or null" if nullable else ""))
        elif value < minimum:
            self.err(path, f"must be {minimum} or more")

    def boolean(self, value, path):
        if not isinstance(value, bool):
            self.err(path, "must be true or false")

    def labels(self, value, path):
        if not isinstance(value, dict):
            self.err(path, "must be a mapping of label: value")
            return
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str | int | float) or isinstance(v, bool):
                self.err((*path, str(k)), "labels are strings (quote numbers and booleans)")

    def items(self, value, path, check, key: str | None):
        if not isinstance(value, list):
            self.err(path, "must be a list")
            return
        seen: dict = {}
        for i, item in enumerate(value):
            check(item, (*path, i))
            name = item.get(key) if key and isinstance(item, dict) else None
            if isinstance(name, str):
                if name in seen:
                    self.err((*path, i, key), f"{name} is declared twice (also item {seen[name] + 1})")
                seen.setdefault(name, i)


def _regex(pattern: str, message: str):
    compiled = re.compile(pattern)

    def check(value: str) -> None:
        if not compiled.match(value):
            raise ValidationError(message)

    return check


CLUSTER_NAME = _regex(r"^[-a-zA-Z0-9_]{1,40}$", "Letters, digits, - and _ (up to 40).")


def check_shape(data: dict, lines: dict) -> list[LabError]:
    """Every error that can be found without changing anything: types, required and unknown fields, the
    models' name rules, lending within nominal, references to flavors that exist nowhere. The rules that
    need the database as it would become (capacity, jobs running on a node) are checked while applying."""
    s = _Shape(lines)
    known_flavors = set(Flavor.objects.values_list("name", flat=True)) | {
        f.get("name") for f in (data.get("flavors") or []) if isinstance(f, dict)}
    known_depts = set(Department.objects.values_list("slug", flat=True)) | {
        d.get("slug") for d in (data.get("departments") or []) if isinstance(d, dict)}

    def flavor_ref(v, p):
        s.string(v, p)
        if isinstance(v, str) and v not in known_flavors:
            s.err(p, f"no flavor {v} (declare it under flavors:)")

    def flavor(v, p):
        s.obj(v, p, {"name": lambda x, q: s.string(x, q, validators=(FLAVOR_NAME,)),
                     "resource_name": lambda x, q: s.string(x, q, validators=(RESOURCE_NAME,)),
                     "node_labels": s.labels, "gpu_memory_gib": s.integer, "description": s.text}, ("name",))

    def node_group(v, p):
        s.obj(v, p, {"name": lambda x, q: s.string(x, q, validators=(_regex(
                         inventory.GROUP_NAME.pattern, "Lower-case letters, digits and dashes (up to 52)."),)),
                     "flavor": flavor_ref, "nodes": s.integer,
                     "gpus_per_node": lambda x, q: s.integer(x, q, minimum=1), "labels": s.labels},
              ("name", "flavor", "nodes", "gpus_per_node"))

    def cluster(v, p):
        s.obj(v, p, {"name": lambda x, q: s.string(x, q, validators=(CLUSTER_NAME,)),
                     "backend": lambda x, q: s.string(x, q, choices=inventory.BACKENDS),
                     "default": s.boolean, "node_groups": lambda x, q: s.items(x, q, node_group, "name")},
              ("name",))

    def member(v, p):
        s.obj(v, p, {"user": lambda x, q: s.string(x, q, max_length=150), "email": s.text,
                     "role": lambda x, q: s.string(x, q, choices=Role.values),
                     "tier": lambda x, q: s.string(x, q, choices=UserTier.values), "password_env": s.string},
              ("user",))

    def quota(v, p):
        s.obj(v, p, {"nominal": s.integer, "borrowing_limit": lambda x, q: s.integer(x, q, nullable=True),
                     "lending_limit": lambda x, q: s.integer(x, q, nullable=True), "oversubscribe": s.boolean},
              ("nominal",))
        if isinstance(v, dict) and all(isinstance(v.get(k), int) for k in ("nominal", "lending_limit")) \
                and v["lending_limit"] > v["nominal"]:
            s.err((*p, "lending_limit"), "The lending limit cannot exceed the nominal quota.")

    def quotas(v, p):
        if not isinstance(v, dict):
            s.err(p, "must be a mapping of flavor: {nominal: ...}")
            return
        for k, q in v.items():
            flavor_ref(k, (*p, k))
            quota(q, (*p, k))

    def refill(v, p):
        s.obj(v, p, {"mode": lambda x, q: s.string(x, q, choices=REFILL_MODES), "amount": s.integer,
                     "period": lambda x, q: s.string(x, q, choices=PERIODS), "active": s.boolean},
              ("amount",))

    def budget(v, p):
        s.obj(v, p, {"balance": s.integer, "refill": refill})

    def approval(v, p):
        s.obj(v, p, {"gpus_above": lambda x, q: s.integer(x, q, nullable=True),
                     "cost_above": lambda x, q: s.integer(x, q, nullable=True), "realtime": s.boolean})

    def department(v, p):
        s.obj(v, p, {"slug": lambda x, q: s.string(x, q, validators=(SLUG, not_reserved)),
                     "name": lambda x, q: s.string(x, q, max_length=120), "archived": s.boolean,
                     "members": lambda x, q: s.items(x, q, member, "user"), "quotas": quotas,
                     "budget": budget, "approval_rule": approval}, ("slug", "name"))

    def prices(v, p):
        if not isinstance(v, dict):
            s.err(p, "must be a mapping of flavor: {tier: mcr per GPU-hour}")
            return
        for fl, tiers in v.items():
            flavor_ref(fl, (*p, fl))
            if not isinstance(tiers, dict):
                s.err((*p, fl), f"must be a mapping of tier ({', '.join(TIERS)}): mcr per GPU-hour")
                continue
            for t, price in tiers.items():
                if t not in TIERS:
                    s.err((*p, fl, t), f"unknown tier (known: {', '.join(TIERS)})")
                s.integer(price, (*p, fl, t))

    def policy(v, p):
        if not isinstance(v, dict):
            s.err(p, "must be a mapping (the policy document)")
            return
        try:
            policy_from_dict({k: x for k, x in v.items() if k != "version"})
        except PolicyError as exc:
            for key, messages in sorted(exc.errors.items()):
                for m in messages:
                    s.err((*p, *key.split(".")), m)

    def sso_group(v, p):
        s.obj(v, p, {"group": s.string, "department": s.string,
                     "role": lambda x, q: s.string(x, q, choices=Role.values),
                     "tier": lambda x, q: s.string(x, q, choices=UserTier.values)}, ("group", "department"))
        if isinstance(v, dict) and isinstance(v.get("department"), str) and v["department"] not in known_depts:
            s.err((*p, "department"), f"no department {v['department']} (declare it under departments:)")

    def sso(v, p):
        s.obj(v, p, {"groups": lambda x, q: s.items(x, q, sso_group, None)})

    def version(v, p):
        if v != VERSION:
            s.err(p, f"this portal reads lab files of version {VERSION}")

    s.obj(data, (), {"version": version, "flavors": lambda x, q: s.items(x, q, flavor, "name"),
                     "clusters": lambda x, q: s.items(x, q, cluster, "name"),
                     "departments": lambda x, q: s.items(x, q, department, "slug"),
                     "prices": prices, "policy": policy, "sso": sso})
    if isinstance(data.get("clusters"), list):
        defaults = [i for i, c in enumerate(data["clusters"]) if isinstance(c, dict) and c.get("default")]
        if len(defaults) > 1:
            s.err(("clusters", defaults[1], "default"), "only one cluster can be the default")
    if isinstance(data.get("departments"), list):
        users: dict = {}
        for i, d in enumerate(data["departments"]):
            for j, m in enumerate((d or {}).get("members") or [] if isinstance(d, dict) else []):
                u = m.get("user") if isinstance(m, dict) else None
                if isinstance(u, str):
                    if u in users:
                        s.err(("departments", i, "members", j, "user"),
                              f"{u} is a member of {users[u]} already: a user belongs to one department")
                    users.setdefault(u, d.get("slug"))
    return sorted(s.errors, key=lambda e: e.line or 0)


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


def _fmt(v) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _diff(old: dict, new: dict) -> list[str]:
    """``field: old -> new`` for each changed field; for something new (``old`` empty), ``field: value``."""
    if not old:
        return [f"{k}: {_fmt(v)}" for k, v in new.items() if v is not None]
    return [f"{k}: {_fmt(old.get(k))} -> {_fmt(new.get(k))}" for k in new if old.get(k) != new.get(k)]


class _Applier:
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
            self.r.errors.append(LabError(path, " ".join(exc.messages), _line(self.lines, path)))
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
                                                  i["message"], _line(self.lines, (*path, f))))
        else:
            self.r.errors.append(LabError(path, exc.message, _line(self.lines, path)))

    def fail(self, path: tuple, message: str) -> None:
        self.r.errors.append(LabError(path, message, _line(self.lines, path)))

    # ---------------------------------------------------------------- flavors
    def flavors(self):
        for i, f in enumerate(self.data.get("flavors") or []):
            path = ("flavors", i)
            want = {"resource_name": f.get("resource_name", "nvidia.com/gpu"),
                    "node_labels": {str(k): str(v) for k, v in (f.get("node_labels") or {}).items()},
                    "gpu_memory_gib": f.get("gpu_memory_gib", 0), "description": f.get("description", "")}
            cur = Flavor.objects.filter(name=f["name"]).first()
            if cur is None:
                self.run(path, "+", f"flavor {f['name']}", [f"resource: {want['resource_name']}"],
                         lambda f=f, w=want: flavor_services.flavor_create(actor=self.actor, name=f["name"], **w))
            else:
                old = {k: getattr(cur, k) for k in want}
                if old != want:
                    self.run(path, "~", f"flavor {f['name']}", _diff(old, want),
                             lambda c=cur, w=want: flavor_services.flavor_update(flavor=c, actor=self.actor, **w))

    # ---------------------------------------------------------------- clusters
    def clusters(self):
        for i, c in enumerate(self.data.get("clusters") or []):
            path = ("clusters", i)
            want = {"backend": c.get("backend", "simulated"), "is_default": bool(c.get("default", False))}
            cur = Cluster.objects.filter(name=c["name"]).first()
            if cur is None:
                self.run(path, "+", f"cluster {c['name']}", _diff({}, want),
                         lambda c=c, w=want: inventory.cluster_create(actor=self.actor, name=c["name"], **w))
            else:
                old = {"backend": cur.backend, "is_default": cur.is_default}
                if old != want and (old["backend"] != want["backend"] or want["is_default"]):
                    w = {k: v for k, v in want.items() if old[k] != v}
                    self.run(path, "~", f"cluster {c['name']}", _diff(old, want),
                             lambda cur=cur, w=w: inventory.cluster_update(cluster=cur, actor=self.actor, **w))
            cluster = Cluster.objects.filter(name=c["name"]).first()
            if cluster is None:
                continue
            current = inventory.node_groups(cluster)
            declared = set()
            for j, g in enumerate(c.get("node_groups") or []):
                gpath = (*path, "node_groups", j)
                declared.add(g["name"])
                flavor = Flavor.objects.filter(name=g["flavor"]).first()
                if flavor is None:
                    self.fail((*gpath, "flavor"), f"no flavor {g['flavor']} (declare it under flavors:)")
                    continue
                labels = {str(k): str(v) for k, v in (g.get("labels") or flavor.node_labels or {}).items()}
                want_g = {"flavor": flavor.name, "nodes": g["nodes"], "gpus_per_node": g["gpus_per_node"],
                          "labels": labels}
                old_g = current.get(g["name"])
                if old_g == want_g:
                    continue
                self.run(gpath, "+" if old_g is None else "~", f"node group {c['name']}/{g['name']}",
                         _diff(old_g or {}, want_g),
                         lambda cl=cluster, g=g, fl=flavor, lb=labels: inventory.node_group_set(
                             cluster=cl, actor=self.actor, name=g["name"], flavor=fl, nodes=g["nodes"],
                             gpus_per_node=g["gpus_per_node"], labels=lb))
            if self.prune and not inventory.inventory_owned(cluster):
                for name in sorted(set(current) - declared):
                    self.run(path, "-", f"node group {c['name']}/{name}", [],
                             lambda cl=cluster, n=name: inventory.node_group_delete(cluster=cl, actor=self.actor,
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
                    self.run(path, "~", f"department {d['slug']}", _diff({"name": cur.name}, {"name": d["name"]}),
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
                    self.run(mpath, "~", f"user {username}", _diff({"email": user.email}, {"email": m["email"]}),
                             lambda u=user, e=m["email"]: _set_email(u, e))
                if existing is not None and existing.department_id == cur.pk:
                    old = {"role": existing.role, "user_tier": existing.user_tier}
                    if old != want:
                        self.run(mpath, "~", f"member {d['slug']}/{username}", _diff(old, want),
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
            for fname, q in (d.get("quotas") or {}).items():
                path = ("departments", i, "quotas", fname)
                declared.add(fname)
                flavor = Flavor.objects.filter(name=fname).first()
                if flavor is None:
                    self.fail(path, f"no flavor {fname} (declare it under flavors:)")
                    continue
                want = {"nominal": q["nominal"], "borrowing_limit": q.get("borrowing_limit"),
                        "lending_limit": q.get("lending_limit")}
                cur = Quota.objects.filter(department=dept, flavor=flavor).first()
                over = bool(q.get("oversubscribe", False))
                if cur is None:
                    changes.append((want["nominal"], path, "+", f"quota {d['slug']}/{fname}", _diff({}, want),
                                    lambda dp=dept, fl=flavor, w=want, o=over: rules.quota_create(
                                        department=dp, flavor=fl, actor=self.actor, oversubscribe=o,
                                        comment="lab file", **w)))
                else:
                    old = {k: getattr(cur, k) for k in want}
                    if old != want:
                        changes.append((want["nominal"] - cur.nominal, path, "~", f"quota {d['slug']}/{fname}",
                                        _diff(old, want),
                                        lambda c=cur, w=want, o=over: rules.quota_set(
                                            quota=c, actor=self.actor, oversubscribe=o, comment="lab file", **w)))
            if self.prune:
                for q in Quota.objects.filter(department=dept).exclude(flavor__name__in=declared).select_related(
                        "flavor", "department"):
                    changes.append((-q.nominal, ("departments", i, "quotas"), "-",
                                    f"quota {d['slug']}/{q.flavor.name}", [],
                                    lambda q=q: rules.quota_delete(quota=q, actor=self.actor,
                                                                   comment="pruned by the lab file")))
        # Decreases first: GPUs moved from one department to another never count twice on the way.
        for _, path, sign, what, details, fn in sorted(changes, key=lambda c: c[0]):
            self.run(path, sign, what, details, fn)

    # ---------------------------------------------------------------- prices, budgets, approval rules
    def prices(self):
        declared = set()
        for fname, tiers in (self.data.get("prices") or {}).items():
            flavor = Flavor.objects.filter(name=fname).first()
            if flavor is None:
                self.fail(("prices", fname), f"no flavor {fname} (declare it under flavors:)")
                continue
            current = dict(Price.objects.filter(flavor=flavor).values_list("tier", "per_gpu_hour"))
            steps = []
            for tier, price in tiers.items():
                declared.add((fname, tier))
                old = current.get(tier)
                if old == price:
                    continue
                up = old is None or price > old
                # Realtime must stay dearer at every step: raise realtime and lower the others first.
                first = (tier == "realtime") == up
                steps.append((0 if first else 1, 0 if tier == "realtime" else 1, tier, price, old))
            for _, _, tier, price, old in sorted(steps):
                self.run(("prices", fname, tier), "+" if old is None else "~", f"price {fname}/{tier}",
                         [f"per_gpu_hour: {_fmt(old)} -> {price}"] if old is not None else [f"{price} mcr/GPU-h"],
                         lambda fl=flavor, t=tier, p=price: pricing.price_set(flavor=fl, tier=t, per_gpu_hour=p,
                                                                             actor=self.actor))
        if self.prune:
            for p in Price.objects.select_related("flavor").order_by("flavor__name", "tier"):
                if (p.flavor.name, p.tier) not in declared:
                    self.run(("prices",), "-", f"price {p.flavor.name}/{p.tier}", [],
                             lambda p=p: pricing.price_delete(price=p, actor=self.actor))

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
                                 _diff(old or {}, want),
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
                             f"approval rule {d['slug']}", _diff(old or {}, want),
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
            self.run(("policy",), "~", "policy", [f"v{version} -> v{version + 1}"] + _flat_diff(old, want),
                     lambda: policy_update(user=self.actor, data=want, comment="lab file"))

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
                         _diff(old or {}, want),
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
                     lambda c=c: inventory.cluster_delete(cluster=c, actor=self.actor, comment="pruned by the lab file"))
        flavors = {f["name"] for f in self.data.get("flavors") or []}
        for f in Flavor.objects.exclude(name__in=flavors):
            self.run(("flavors",), "-", f"flavor {f.name}", [],
                     lambda f=f: flavor_services.flavor_delete(flavor=f, actor=self.actor,
                                                               comment="pruned by the lab file"))


def _flat_diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _flat_diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {_fmt(a)} -> {_fmt(b)}")
    return out


def _set_email(user, email: str) -> None:
    user.email = email
    user.save(update_fields=["email"])


def _add(dept, actor, want, m):
    membership = member_services.member_add(department=dept, actor=actor, username=m["user"],
                                            email=m.get("email") or "", role=want["role"],
                                            user_tier=want["user_tier"], comment="lab file")
    env = m.get("password_env")
    user = membership.user
    if env and os.environ.get(env) and not user.has_usable_password():
        user.set_password(os.environ[env])  # given by the environment, never written in the file
        user.save(update_fields=["password"])
    return membership


def _move(existing, dept, actor, want, m):
    member_services.member_remove(membership=existing, actor=actor, comment=f"moved to {dept.slug} by the lab file")
    return _add(dept, actor, want, m)


def apply_lab(text: str, *, actor=None, dry_run: bool = False, prune: bool = False) -> Result:
    """Apply a lab file (see the module's docstring). Raises LabFileInvalid with every error, having changed
    nothing; returns what changed (or, with ``dry_run``, what would change)."""
    data, lines = load(text)
    errors = check_shape(data, lines)
    if errors:
        raise LabFileInvalid(errors)
    a = _Applier(data, lines, actor=actor, prune=prune)
    with transaction.atomic():
        a.flavors()
        a.clusters()
        a.departments()
        a.quotas()
        a.prices()
        a.budgets()
        a.policy()
        a.sso()
        a.archives()
        a.prune_rest()
        if a.r.errors or dry_run:
            transaction.set_rollback(True)
    if a.r.errors:
        raise LabFileInvalid(sorted(a.r.errors, key=lambda e: (e.line or 0, str(e.path))))
    return a.r


# ------------------------------------------------------------------------------------------ export


def export_lab() -> dict:
    """The current lab as a lab file's data (see ``dump``)."""
    out: dict = {"version": VERSION}
    out["flavors"] = [
        {"name": f.name, "resource_name": f.resource_name, "node_labels": dict(f.node_labels or {}),
         "gpu_memory_gib": f.gpu_memory_gib, **({"description": f.description} if f.description else {})}
        for f in Flavor.objects.order_by("name")]
    clusters = []
    for c in Cluster.objects.order_by("name"):
        entry: dict = {"name": c.name, "backend": c.backend}
        if c.is_default:
            entry["default"] = True
        groups = inventory.node_groups(c)
        if groups and not inventory.inventory_owned(c):
            entry["node_groups"] = [{"name": n, **g} for n, g in sorted(groups.items())]
        clusters.append(entry)
    out["clusters"] = clusters
    capacity = {f.pk: rules.flavor_capacity(f) for f in Flavor.objects.all()}
    nominal: dict = {}
    for q in Quota.objects.all():
        nominal[q.flavor_id] = nominal.get(q.flavor_id, 0) + q.nominal
    over = {fid for fid, n in nominal.items() if n > capacity.get(fid, 0)}
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
        for q in Quota.objects.filter(department=d).select_related("flavor").order_by("flavor__name"):
            quotas[q.flavor.name] = {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit,
                                     "lending_limit": q.lending_limit,
                                     **({"oversubscribe": True} if q.flavor_id in over else {})}
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
        depts.append(entry)
    out["departments"] = depts
    prices: dict = {}
    for p in Price.objects.select_related("flavor").order_by("flavor__name", "tier"):
        prices.setdefault(p.flavor.name, {})[p.tier] = p.per_gpu_hour
    out["prices"] = prices
    mappings = [{"group": m.group, "department": m.department.slug, "role": m.role, "tier": m.user_tier}
                for m in SsoGroupMapping.objects.select_related("department").order_by("id")]
    if mappings:
        out["sso"] = {"groups": mappings}
    if PolicyVersion.objects.exists():
        doc = policy_to_dict(current_policy()[0])
        doc.pop("version", None)
        out["policy"] = doc
    return out


def dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
