"""Reading a lab file: YAML with line numbers, and every error that can be found without changing anything
(types, required and unknown fields, the models' name rules, references). See ``lab.services.labfile``."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml
from django.core.exceptions import ValidationError

from portal.models import SLUG, Department, Role, UserTier, not_reserved
from quotas.models import FLAVOR_NAME, RESOURCE_NAME, Flavor
from scheduling.core.policy import PolicyError, policy_from_dict
from scheduling.core.types import TIERS
from scheduling.models import Cluster
from scheduling.services import inventory

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


def line_of(lines: dict, path: tuple) -> int | None:
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
        self.errors.append(LabError(path, message, line_of(self.lines, path)))

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
    known_clusters = set(Cluster.objects.values_list("name", flat=True)) | {
        c.get("name") for c in (data.get("clusters") or []) if isinstance(c, dict)}

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
                     "default": s.boolean, "node_groups": lambda x, q: s.items(x, q, node_group, "name"),
                     "state": lambda x, q: s.string(x, q, choices=inventory.STATES),
                     "labels": s.labels, "cost_rank": lambda x, q: s.integer(x, q, minimum=inventory.COST_RANK_RANGE[0]),
                     "kubeconfig": lambda x, q: s.string(x, q, max_length=500),
                     "kubeconfig_env": lambda x, q: s.string(x, q, max_length=100),
                     "context": lambda x, q: s.string(x, q, max_length=253), "in_cluster": s.boolean,
                     "namespace_template": lambda x, q: s.string(x, q, max_length=100)},
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
            s.err(p, "must be a mapping of flavor (or flavor@cluster): {nominal: ...}")
            return
        for k, q in v.items():
            # ``flavor@cluster`` is a quota on that cluster only (the simulator's key).
            fname, at, cname = str(k).partition("@")
            flavor_ref(fname if at else k, (*p, k))
            if at and cname not in known_clusters:
                s.err((*p, k), f"no cluster {cname!r} (declare it under clusters:); a per-cluster quota is "
                               "flavor@cluster")
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
                     "prices": prices, "policy": policy, "sso": sso,
                     "secrets": lambda x, q: check_secrets(s, x, q, known_depts)})
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




# ------------------------------------------------------------------------------------------ secrets
ENV_NAME = _regex(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", "An environment variable name (letters, digits, _).")


def check_secrets(s: _Shape, value, path: tuple, known_depts: set) -> None:
    """The ``secrets:`` section: department secrets, without their values. A value is named by the
    environment variable ``lab apply`` reads it from (``values_env: {key: VARIABLE}``, ``password_env``), so
    the file can be kept in git. The declaration's own rules are the secrets service's, checked at apply."""

    def env_map(v, p):
        if not isinstance(v, dict) or not v:
            s.err(p, "must be a mapping of key: ENVIRONMENT_VARIABLE (the value is read from the environment)")
            return
        for k, var in v.items():
            if not isinstance(k, str):
                s.err((*p, str(k)), "keys are strings")
            s.string(var, (*p, k), max_length=128, validators=(ENV_NAME,))

    def plain(v, p):  # a value written into the file itself is refused (and never quoted back)
        s.err(p, f"values are never written in a lab file: use {p[-1]}_env naming the environment variable "
                 "that holds it" if p[-1] == "password" else "values are never written in a lab file: use "
                 "values_env: {key: VARIABLE}, naming the environment variables that hold them")

    def secret(v, p):
        s.obj(v, p, {"department": s.string, "name": lambda x, q: s.string(x, q, max_length=40),
                     "kind": lambda x, q: s.string(x, q, choices=("reference", "value")),
                     "purpose": lambda x, q: s.string(x, q, choices=("env", "image-pull")),
                     "reference_name": lambda x, q: s.string(x, q, max_length=253),
                     "keys": lambda x, q: [s.string(k, (*q, i), max_length=253) for i, k in enumerate(x)]
                     if isinstance(x, list) else s.err(q, "must be a list of keys"),
                     "values_env": env_map,
                     "password_env": lambda x, q: s.string(x, q, max_length=128, validators=(ENV_NAME,)),
                     "registry": lambda x, q: s.string(x, q, max_length=253),
                     "username": lambda x, q: s.string(x, q, max_length=253),
                     "values": plain, "password": plain},
              ("department", "name", "kind"))
        if not isinstance(v, dict):
            return
        if isinstance(v.get("department"), str) and v["department"] not in known_depts:
            s.err((*p, "department"), f"no department {v['department']} (declare it under departments:)")
        if v.get("kind") == "value" and v.get("purpose") == "image-pull" and "values_env" in v:
            s.err((*p, "values_env"), "an image pull secret's value is its password_env")
        if v.get("kind") == "reference" and ("values_env" in v or "password_env" in v):
            s.err(p, "a reference keeps its values in the cluster: give reference_name and keys")

    if not isinstance(value, list):
        s.err(path, "must be a list")
        return
    seen: dict = {}
    for i, item in enumerate(value):
        secret(item, (*path, i))
        if isinstance(item, dict):
            key = (item.get("department"), item.get("name"))
            if key in seen and all(isinstance(k, str) for k in key):
                s.err((*path, i, "name"), f"{key[0]}/{key[1]} is declared twice (also item {seen[key] + 1})")
            seen.setdefault(key, i)
