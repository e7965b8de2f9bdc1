"""Reading a lab file: YAML with line numbers, and every error that can be found without changing anything
(types, required and unknown fields, the models' name rules, references). See ``lab.services.labfile``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import yaml
from django.conf import settings
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from engine.policy import PolicyError, policy_from_dict
from engine.types import TIERS
from lab.inputs import DepartmentCreateSerializer, MemberCreateSerializer
from portal.errors import ValidationFailed
from portal.models import Department, Role, UserTier
from quotas.api.budgets import (
    ApprovalRuleSerializer,
    PriceInputSerializer,
    RefillRuleSerializer,
    WalletBudgetSerializer,
)
from quotas.api.preemption_limits import PreemptionLimitSerializer
from quotas.api.teams import TeamMemberSerializer, TeamQuotaSerializer, TeamSerializer
from quotas.api.user_limits import UserLimitSerializer
from quotas.api.views import FlavorInputSerializer, QuotaCreateSerializer
from quotas.models import Flavor
from quotas.services import rules
from scheduling.api.calendar import BookingCreateSerializer, MaintenanceCreateSerializer
from scheduling.api.clusters import ClusterCreateSerializer, NodeGroupInputSerializer
from scheduling.api.serializers import JobTemplateWriteSerializer
from scheduling.models import Cluster
from scheduling.services import cluster_config
from workloads.api.serializers import SecretCreateSerializer
from workloads.api.sources import DataSourceInputSerializer
from workloads.services import sources as source_services

VERSION = 1

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


# A lab file is small, plain data: these limits refuse hostile input before it costs memory or time.
MAX_DEPTH = 20  # collections inside collections; the deepest real lab file nests 5
MAX_NODES = 100_000  # values, keys and collections; a lab of 1,000 departments has about 20,000
MAX_ERRORS = 100  # listed; the rest are counted
DEFAULT_MAX_KB = 1024


def max_bytes() -> int:
    """The largest lab file read, in bytes (``LAB_FILE_MAX_KB``)."""
    return int(getattr(settings, "LAB_FILE_MAX_KB", DEFAULT_MAX_KB)) * 1024


def _refused(message: str, line: int | None = None) -> LabFileInvalid:
    return LabFileInvalid([LabError((), message, line)])


def decode(raw: bytes, *, size: int | None = None) -> str:
    """The file's text: at most ``max_bytes()``, strict UTF-8 (a byte-order mark is allowed). ``size`` is the
    whole file's size when the caller read only its first ``max_bytes() + 1`` bytes."""
    limit = max_bytes()
    if len(raw) > limit:
        got = f"{size} bytes" if size and size > limit else f"more than {limit} bytes"
        raise _refused(f"the file is {got}; a lab file may be at most {limit} bytes (LAB_FILE_MAX_KB)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise _refused(f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} (save the file as UTF-8)",
                       line) from None


class _Guarded:
    """The safe loader's composer without anchors and aliases (a lab file needs neither, and aliases are how a
    few hundred bytes expand to gigabytes), and with a nesting cap checked as each collection opens, before
    the composer's recursion could exhaust the stack."""

    depth = nodes = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _refused(f"more than {MAX_NODES} values: too large for a lab file", event.start_mark.line + 1)
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            kind = "aliases (*" if isinstance(event, yaml.AliasEvent) else "anchors (&"
            raise _refused(f"YAML {kind}{event.anchor}) are not allowed in a lab file: write the value out",
                           event.start_mark.line + 1)
        nested = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if nested:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark.line + 1)
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self.depth -= 1


class _PyLoader(_Guarded, yaml.SafeLoader):
    pass


LOADERS: tuple[type, ...] = (_PyLoader,)
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _CLoader(_Guarded, Composer, CParser, SafeConstructor, Resolver):
        """libyaml's parser (the same events, several times faster: a 1 MiB file in about 2 s instead of 12)
        under the same Python composer, so the guards above see every node."""

        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    LOADERS = (_CLoader, _PyLoader)


def load(source: str | bytes, *, loader_class: type | None = None) -> tuple[dict, dict]:
    """The file's data and its line map. A syntax error is refused with its line; so are a file over the size
    limit, bytes that are not UTF-8, anchors and aliases, and nesting deeper than ``MAX_DEPTH``."""
    if isinstance(source, bytes):
        text = decode(source)
    else:
        text = source
        if len(text) > max_bytes() or len(text.encode("utf-8", "surrogatepass")) > max_bytes():
            raise _refused(f"the file is more than {max_bytes()} bytes; a lab file may be at most {max_bytes()} "
                           "bytes (LAB_FILE_MAX_KB)")
    loader = None
    try:  # composed once: the same tree gives the data and the line numbers
        loader = (loader_class or LOADERS[0])(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most control characters)
        raise LabFileInvalid([LabError((), f"not valid YAML: the character #x{exc.character:04x} is not allowed"
                                       if isinstance(exc.character, int) else f"not valid YAML: {exc.reason}",
                                       text[:exc.position].count("\n") + 1)])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise LabFileInvalid([LabError((), f"not valid YAML: {exc.problem or exc}",
                                       mark.line + 1 if mark else None)])
    except yaml.YAMLError as exc:
        raise LabFileInvalid([LabError((), f"not valid YAML: {exc}")])
    except ValueError as exc:  # a scalar Python refuses to convert, e.g. an integer of 5,000 digits
        raise LabFileInvalid([LabError((), f"not valid YAML: {str(exc).split(':')[0]}")])
    finally:
        if loader is not None:
            loader.dispose()
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


@dataclass(frozen=True)
class Section:
    """How one mapping of a lab file is read through the API's input serializer for the same thing, so each
    field is declared once: ``names`` maps the file's keys to the serializer's, ``drop`` lists the serializer's
    fields the file does not take (an API comment, what the URL names), ``optional`` the ones the file may
    leave out, and ``extra`` the file's own keys (nested sections, references) with their checks."""

    serializer: type
    names: dict = field(default_factory=dict)
    drop: tuple = ()
    optional: tuple = ()
    extra: tuple = ()
    required_extra: tuple = ()


# ``kind: cpu`` declares a CPU pool (nodes without GPUs); a flavor's kind is set when it is created.
FLAVOR = Section(FlavorInputSerializer, extra=("kind",))
FLAVOR_KINDS = ("gpu", "cpu")
CLUSTER = Section(ClusterCreateSerializer, names={"default": "is_default"}, extra=("node_groups",))
# A CPU pool's group says its nodes' size in whole cores and GiB instead of GPUs per node.
NODE_GROUP = Section(NodeGroupInputSerializer, drop=("comment",), optional=("gpus_per_node",),
                     extra=("name", "cores", "memory_gib"), required_extra=("name",))
CPU_QUOTA_KEYS = ("cores", "memory_gib")  # a CPU pool's quota: one row of each, as a GPU flavor's has one
CPU_PRICE_KEYS = ("per_core_hour", "per_gib_hour")
DEPARTMENT = Section(DepartmentCreateSerializer, drop=("comment",),
                     extra=("archived", "members", "quotas", "budget", "approval_rule", "user_limits", "teams"))
# A team under its department: its split of the department's GPU quotas, and its members (``admin``: a team
# admin), each a member of the department.
TEAM = Section(TeamSerializer, drop=("department",), extra=("quotas", "members"))
TEAM_QUOTA = Section(TeamQuotaSerializer)
TEAM_MEMBER = Section(TeamMemberSerializer, names={"admin": "team_admin"}, extra=("user",), required_extra=("user",))
MEMBER = Section(MemberCreateSerializer, names={"user": "username", "tier": "user_tier"}, drop=("comment",),
                 extra=("password_env",))
QUOTA = Section(QuotaCreateSerializer, drop=("department", "flavor", "cluster", "comment"))
BUDGET = Section(WalletBudgetSerializer, drop=("comment",), optional=("balance",), extra=("refill",))
REFILL = Section(RefillRuleSerializer)
APPROVAL = Section(ApprovalRuleSerializer)
USER_LIMIT = Section(UserLimitSerializer, extra=("user",))  # no user: every member's (the department's)
PRICE = Section(PriceInputSerializer, drop=("flavor",))
# A lab file's templates are its departments' (no scope); the spec is checked as a submission while applying,
# when the flavors the file declares exist.
TEMPLATE = Section(JobTemplateWriteSerializer, drop=("scope", "spec"), extra=("department", "spec"),
                   required_extra=("department", "spec"))
# A secret's values are never written in the file: each is named by the environment variable it is read from.
SECRET = Section(SecretCreateSerializer, drop=("values", "department"),
                 extra=("department", "values_env", "password_env", "values", "password"),
                 required_extra=("department",))
# A data source names its cluster, its owning department (none: the platform's) and the departments it is
# shared with; the references are checked against what the database or the file declares.
DATA_SOURCE = Section(DataSourceInputSerializer)
# A preemption limit is the lab's (no department) or one department's, for one tier.
PREEMPTION_LIMIT = Section(PreemptionLimitSerializer, extra=("department",))
# The calendar: a booking names its department and cluster (no "your own", no default cluster: the file says
# whose and where); a maintenance window its cluster. Each is known by its place and start (see ``calendar_key``).
BOOKING = Section(BookingCreateSerializer, drop=("department", "cluster"), extra=("department", "cluster"),
                  required_extra=("department", "cluster"))
MAINTENANCE = Section(MaintenanceCreateSerializer, drop=("cluster",), extra=("cluster",), required_extra=("cluster",))
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# The file's words for the serializers' type errors (and no echo of the value: it may be a secret's).
PHRASES = {"not_a_list": "must be a list", "not_a_dict": "must be a mapping"}


class _Shape:
    """Collects every error of a file, each with its path and line."""

    def __init__(self, lines: dict):
        self.lines = lines
        self.errors: list[LabError] = []

    def err(self, path: tuple, message: str) -> None:
        self.errors.append(LabError(path, message, line_of(self.lines, path)))

    def mapping(self, value, path: tuple, what: str = "a mapping") -> bool:
        if not isinstance(value, dict):
            self.err(path, f"must be {what}")
        return isinstance(value, dict)

    def read(self, value, path: tuple, section: Section, checks: dict | None = None) -> bool:
        """``value`` through ``section``'s serializer: every error at its path, and on success the values as
        the API reads them (``"2"`` a number, ``yes`` true) written back over the file's; then each of the
        file's own keys present through its ``checks`` entry. Returns whether the serializer's fields were
        valid."""
        if not self.mapping(value, path):
            return False
        for k, check in (checks or {}).items():
            if k in value:
                check(value[k], (*path, k))
        lab_name = {v: k for k, v in section.names.items()}
        body = {section.names.get(k, k): v for k, v in value.items() if k not in section.extra}
        serializer = section.serializer(data=body)
        for name in section.drop:  # a field the file does not take is an unknown field, as in the API
            serializer.fields.pop(name)
        for name in section.optional:
            serializer.fields[name].required = False
        known = [lab_name.get(n, n) for n in serializer.fields] + list(section.extra)
        for k in section.required_extra:
            if value.get(k) is None:
                self.err((*path, k) if k in value else path, f"{k} is required")
        if serializer.is_valid():
            for name, v in serializer.validated_data.items():
                if lab_name.get(name, name) in value:
                    value[lab_name.get(name, name)] = v
            return True
        for name, detail in serializer.errors.items():
            key = lab_name.get(name, name)
            code = getattr(detail[0], "code", None) if isinstance(detail, list) and detail else None
            if name == "non_field_errors":
                self.details(detail, path)
            elif code == "required":  # where the file's other required keys are reported
                self.err(path, f"{key} is required")
            elif code == "unknown_field":
                self.err((*path, key), f"unknown field (known: {', '.join(known)})")
            elif code == "invalid_choice":
                self.err((*path, key), f"must be one of {', '.join(map(str, serializer.fields[name].choices))}")
            elif code in PHRASES:
                self.err((*path, key), PHRASES[code])
            else:
                self.details(detail, (*path, key))
        return False

    def details(self, detail, path: tuple) -> None:
        """A serializer's errors, nested as its fields are (a dict's keys, a list's indexes), at their paths."""
        if isinstance(detail, dict):
            for k, v in detail.items():
                self.details(v, path if k == "non_field_errors" else (*path, k))
        elif isinstance(detail, list):
            for d in detail:
                self.details(d, path) if isinstance(d, dict | list) else self.err(path, str(d))
        else:
            self.err(path, str(detail))

    def string(self, value, path, *, choices=None):
        if not isinstance(value, str) or not value.strip():
            self.err(path, "must be a non-empty string")
        elif choices and value not in choices:
            self.err(path, f"must be one of {', '.join(choices)}")

    def boolean(self, value, path):
        if not isinstance(value, bool):
            self.err(path, "must be true or false")

    def unknown(self, value: dict, path: tuple, known: tuple) -> None:
        for k in value:
            if k not in known:
                self.err((*path, k), f"unknown field (known: {', '.join(known)})")

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


class _LabShape(_Shape):
    """The sections of a lab file, each read through the API's serializer for it, and the references between
    them (a quota's flavor, a group's department) to what the database or the file declares."""

    def __init__(self, data: dict, lines: dict):
        super().__init__(lines)
        self.data = data
        self.flavors = set(Flavor.objects.values_list("name", flat=True)) | self.declared("flavors", "name")
        self.departments = set(Department.objects.values_list("slug", flat=True)) | self.declared(
            "departments", "slug")
        self.clusters = set(Cluster.objects.values_list("name", flat=True)) | self.declared("clusters", "name")
        self.templates_seen: dict = {}

    def declared(self, key: str, name: str) -> set:  # a section that is not a list is reported by its own check
        items = self.data.get(key)
        return {i[name] for i in items if isinstance(i, dict) and isinstance(i.get(name), str)} \
            if isinstance(items, list) else set()

    def declared_ref(self, v, p, kind: str, names: set) -> None:
        """``v`` names a ``kind`` that the database or the file declares."""
        self.string(v, p)
        if isinstance(v, str) and v not in names:
            self.err(p, f"no {kind} {v} (declare it under {kind}s:)")

    def flavor_ref(self, v, p):
        self.declared_ref(v, p, "flavor", self.flavors)

    def department_ref(self, v, p):
        self.declared_ref(v, p, "department", self.departments)

    def flavor(self, v, p):
        self.read(v, p, FLAVOR, {"kind": lambda x, q: self.string(x, q, choices=FLAVOR_KINDS)})

    def count(self, v, p, *, low: int = 0, high: int = 10**12):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            self.err(p, f"must be a whole number from {low} to {high}")

    def node_group(self, v, p):
        self.read(v, p, NODE_GROUP, {"cores": lambda x, q: self.count(x, q, low=1, high=4096),
                                     "memory_gib": lambda x, q: self.count(x, q, low=1, high=65536)})
        if isinstance(v, dict):
            if "gpus_per_node" not in v and not {"cores", "memory_gib"} <= set(v):
                self.err(p, "gpus_per_node is required (a CPU pool's group: cores and memory_gib)")
            elif "gpus_per_node" in v and len({"cores", "memory_gib"} & set(v)) == 1:
                self.err(p, "a GPU group states both cores and memory_gib of its nodes (for CPU work on GPU "
                            "nodes), or neither")
            if isinstance(v.get("name"), str):
                try:
                    cluster_config.validate_group_name(v["name"])
                except ValidationFailed as exc:
                    self.details([e["message"] for e in exc.fields["group"]], (*p, "name"))
            if isinstance(v.get("flavor"), str):
                self.flavor_ref(v["flavor"], (*p, "flavor"))

    def cluster(self, v, p):
        self.read(v, p, CLUSTER, {"node_groups": lambda x, q: self.items(x, q, self.node_group, "name")})

    def member(self, v, p):
        self.read(v, p, MEMBER, {"password_env": self.string})

    def quota(self, v, p):
        if self.read(v, p, QUOTA):
            errors = rules.quota_limit_errors(nominal=v.get("nominal"), borrowing=v.get("borrowing_limit"),
                                              lending=v.get("lending_limit"))
            for name, items in errors.items():
                self.details([i["message"] for i in items], (*p, name))

    def quotas(self, v, p):
        if not self.mapping(v, p, "a mapping of flavor (or flavor@cluster): {nominal: ...}"):
            return
        for k, q in v.items():
            # ``flavor@cluster`` is a quota on that cluster only (the simulator's key).
            fname, at, cname = str(k).partition("@")
            self.flavor_ref(fname if at else k, (*p, k))
            if at and cname not in self.clusters:
                self.err((*p, k), f"no cluster {cname!r} (declare it under clusters:); a per-cluster quota is "
                                  "flavor@cluster")
            if isinstance(q, dict) and set(q) & set(CPU_QUOTA_KEYS):
                self.unknown(q, (*p, k), CPU_QUOTA_KEYS)  # a CPU pool's cores and GiB, each a quota of its own
                for r in CPU_QUOTA_KEYS:
                    if r in q:
                        self.quota(q[r], (*p, k, r))
            else:
                self.quota(q, (*p, k))

    def budget(self, v, p):
        self.read(v, p, BUDGET, {"refill": lambda x, q: self.read(x, q, REFILL)})

    def department(self, v, p):
        self.read(v, p, DEPARTMENT, {
            "archived": self.boolean, "members": lambda x, q: self.items(x, q, self.member, "user"),
            "quotas": self.quotas, "budget": self.budget, "approval_rule": lambda x, q: self.read(x, q, APPROVAL),
            "user_limits": lambda x, q: self.items(x, q, lambda y, r: self.read(y, r, USER_LIMIT, {
                "user": self.string}), "user"),
            "teams": lambda x, q: self.items(x, q, self.team, "slug")})
        if isinstance(v, dict) and isinstance(v.get("teams"), list):
            self.one_team_a_member(v, p)

    def team(self, v, p):
        self.read(v, p, TEAM, {"quotas": self.team_quotas,
                               "members": lambda x, q: self.items(x, q, lambda y, r: self.read(y, r, TEAM_MEMBER, {
                                   "user": self.string}), "user")})

    def team_quotas(self, v, p):
        if not self.mapping(v, p, "a mapping of GPU flavor: {nominal: ...} (a team's split counts every cluster)"):
            return
        for k, q in v.items():
            self.flavor_ref(k, (*p, k))
            self.read(q, (*p, k), TEAM_QUOTA)

    def one_team_a_member(self, d: dict, p: tuple) -> None:
        """A member of the department is in at most one of its teams, and only a member of it is in one."""
        members = {m.get("user") for m in d.get("members") or [] if isinstance(m, dict)}
        seen: dict = {}
        for i, t in enumerate(d["teams"]):
            for j, m in enumerate((t or {}).get("members") or [] if isinstance(t, dict) else []):
                u = m.get("user") if isinstance(m, dict) else None
                if not isinstance(u, str):
                    continue
                if u in seen:
                    self.err((*p, "teams", i, "members", j, "user"),
                             f"{u} is in team {seen[u]} already: a member belongs to at most one team")
                elif d.get("members") is not None and u not in members:
                    self.err((*p, "teams", i, "members", j, "user"),
                             f"{u} is not a member of {d.get('slug')} (declare them under its members:)")
                seen.setdefault(u, t.get("slug"))

    def prices(self, v, p):
        if not self.mapping(v, p, "a mapping of flavor: {tier: mcr per GPU-hour}"):
            return
        for fl, tiers in v.items():
            self.flavor_ref(fl, (*p, fl))
            if not self.mapping(tiers, (*p, fl), f"a mapping of tier ({', '.join(TIERS)}): mcr per GPU-hour"):
                continue
            for t, price in tiers.items():
                if isinstance(price, dict):  # a CPU pool's: per core-hour and per GiB-hour
                    if self.mapping(price, (*p, fl, t)):
                        self.unknown(price, (*p, fl, t), CPU_PRICE_KEYS)
                        self.string(t, (*p, fl, t), choices=TIERS)
                        for key in CPU_PRICE_KEYS:
                            if key not in price:
                                self.err((*p, fl, t), f"{key} is required")
                            else:
                                self.count(price[key], (*p, fl, t, key))
                    continue
                body = {"tier": t, "per_gpu_hour": price}
                shape = _Shape(self.lines)  # both fields' errors are the tier's line
                if shape.read(body, (*p, fl, t), PRICE):
                    tiers[t] = body["per_gpu_hour"]
                self.errors += [LabError((*p, fl, t), e.message, e.line) for e in shape.errors]

    def policy(self, v, p):
        if not self.mapping(v, p, "a mapping (the policy document)"):
            return
        try:
            policy_from_dict({k: x for k, x in v.items() if k != "version"})
        except PolicyError as exc:
            for key, messages in sorted(exc.errors.items()):
                for m in messages:
                    self.err((*p, *key.split(".")), m)

    def sso_group(self, v, p):
        if not self.mapping(v, p):
            return
        self.unknown(v, p, ("group", "department", "role", "tier"))
        for k in ("group", "department"):
            if v.get(k) is None:
                self.err((*p, k) if k in v else p, f"{k} is required")
            else:
                self.string(v[k], (*p, k))
        for k, choices in (("role", Role.values), ("tier", UserTier.values)):
            if k in v:
                self.string(v[k], (*p, k), choices=choices)
        if isinstance(v.get("department"), str):
            self.department_ref(v["department"], (*p, "department"))

    def sso(self, v, p):
        if self.mapping(v, p):
            self.unknown(v, p, ("groups",))
            if "groups" in v:
                self.items(v["groups"], (*p, "groups"), self.sso_group, None)

    def template(self, v, p):
        self.read(v, p, TEMPLATE, {"department": self.department_ref, "spec": lambda x, q: self.mapping(
            x, q, "a mapping: a job submission body, as for POST /api/v1/jobs")})
        if not isinstance(v, dict):
            return
        key = (v.get("department"), v.get("name"))
        if all(isinstance(k, str) for k in key):
            if key in self.templates_seen:
                self.err((*p, "name"), f"{key[1]} is declared twice for {key[0]} (also item "
                                       f"{self.templates_seen[key] + 1})")
            self.templates_seen.setdefault(key, p[-1])

    def env_name(self, v, p):
        if not isinstance(v, str) or not ENV_NAME.match(v):
            self.err(p, "must be an environment variable name (letters, digits, _)")

    def env_map(self, v, p):
        if self.mapping(v, p, "a mapping of key: ENVIRONMENT_VARIABLE (the value is read from the environment)"):
            if not v:
                self.err(p, "must name at least one key: ENVIRONMENT_VARIABLE")
            for k, var in v.items():
                self.env_name(var, (*p, k))

    def never_written(self, v, p):  # a secret's value in the file is refused, and never quoted back
        use = "password_env" if p[-1] == "password" else "values_env: {key: VARIABLE}"
        self.err(p, f"values are never written in a lab file: use {use}, naming the environment variable(s) "
                    "that hold them")

    def secret(self, v, p):
        self.read(v, p, SECRET, {"department": self.department_ref, "values_env": self.env_map,
                                 "password_env": self.env_name, "values": self.never_written,
                                 "password": self.never_written})
        if not isinstance(v, dict):
            return
        if v.get("kind") == "value" and v.get("purpose") == "image-pull" and "values_env" in v:
            self.err((*p, "values_env"), "an image pull secret's value is its password_env")
        if v.get("kind") == "reference" and ("values_env" in v or "password_env" in v):
            self.err(p, "a reference keeps its values in the cluster: give reference_name and keys")

    def secrets(self, v, p):
        self.items(v, p, self.secret, None)
        self.once_each(v, p, "department", lambda key: f"{key[0]}/{key[1]} is declared twice")

    def cluster_ref(self, v, p):
        self.declared_ref(v, p, "cluster", self.clusters)

    def data_source(self, v, p):
        self.read(v, p, DATA_SOURCE)
        if not isinstance(v, dict):
            return
        if isinstance(v.get("cluster"), str):
            self.cluster_ref(v["cluster"], (*p, "cluster"))
        if isinstance(v.get("department"), str):
            self.department_ref(v["department"], (*p, "department"))
        for j, slug in enumerate(v.get("shared_with") if isinstance(v.get("shared_with"), list) else []):
            if isinstance(slug, str):
                self.department_ref(slug, (*p, "shared_with", j))
        for name, items in source_services.kind_errors(kind=v.get("kind"), writable=v.get("writable")).items():
            self.details([i["message"] for i in items], (*p, name))

    def data_sources(self, v, p):
        self.items(v, p, self.data_source, None)
        self.once_each(v, p, "cluster", lambda key: f"{key[1]} is declared twice on cluster {key[0]}")

    def once_each(self, v, p, scope: str, twice: Callable[[tuple], str]) -> None:
        """Each item's (``scope``, name) at most once in the list ``v``; ``twice(key)`` says so at the second."""
        seen: dict = {}
        for i, item in enumerate(v if isinstance(v, list) else []):
            key = (item.get(scope), item.get("name")) if isinstance(item, dict) else None
            if key and all(isinstance(k, str) for k in key):
                if key in seen:
                    self.err((*p, i, "name"), f"{twice(key)} (also item {seen[key] + 1})")
                seen.setdefault(key, i)

    def preemption_limit(self, v, p):
        self.read(v, p, PREEMPTION_LIMIT, {"department": self.department_ref})

    def preemption_limits(self, v, p):
        self.items(v, p, self.preemption_limit, None)
        seen: dict = {}
        for i, item in enumerate(v if isinstance(v, list) else []):
            key = (item.get("department"), item.get("tier")) if isinstance(item, dict) else None
            if key and isinstance(key[1], str):
                if key in seen:
                    whose = f"{key[0]}'s" if key[0] else "the lab-wide"
                    self.err((*p, i, "tier"), f"{whose} {key[1]} limit is declared twice (also item {seen[key] + 1})")
                seen.setdefault(key, i)

    def booking(self, v, p):
        self.read(v, p, BOOKING, {"department": self.department_ref, "cluster": self.cluster_ref,
                                  "flavor": self.flavor_ref})

    def maintenance_window(self, v, p):
        self.read(v, p, MAINTENANCE, {"cluster": self.cluster_ref})

    def calendar(self, v, p, check, kind: str):
        """A list of bookings or maintenance windows, each at most once (by ``calendar_key``)."""
        self.items(v, p, check, None)
        seen: dict = {}
        for i, item in enumerate(v if isinstance(v, list) else []):
            key = calendar_key(kind, item) if isinstance(item, dict) else None
            if key is not None:
                if key in seen:
                    self.err((*p, i, "start"), f"the same {kind} is declared twice (also item {seen[key] + 1})")
                seen.setdefault(key, i)

    def bookings(self, v, p):
        self.calendar(v, p, self.booking, "booking")

    def maintenance(self, v, p):
        self.calendar(v, p, self.maintenance_window, "maintenance window")

    SECTIONS = ("version", "flavors", "clusters", "departments", "prices", "policy", "preemption_limits", "sso",
                "templates", "secrets", "data_sources", "maintenance", "bookings")
    LISTS = {"flavors": ("flavor", "name"), "clusters": ("cluster", "name"), "departments": ("department", "slug"),
             "templates": ("template", None)}

    def file(self) -> None:
        data = self.data
        self.unknown(data, (), self.SECTIONS)
        if "version" in data and data["version"] != VERSION:
            self.err(("version",), f"this portal reads lab files of version {VERSION}")
        for key, (check, name) in self.LISTS.items():
            if key in data:
                self.items(data[key], (key,), getattr(self, check), name)
        for key in ("prices", "policy", "preemption_limits", "sso", "secrets", "data_sources", "maintenance",
                    "bookings"):
            if key in data:
                getattr(self, key)(data[key], (key,))
        self.one_default_cluster()
        self.one_department_a_user()

    def one_default_cluster(self) -> None:
        if isinstance(self.data.get("clusters"), list):
            defaults = [i for i, c in enumerate(self.data["clusters"]) if isinstance(c, dict) and c.get("default")]
            if len(defaults) > 1:
                self.err(("clusters", defaults[1], "default"), "only one cluster can be the default")

    def one_department_a_user(self) -> None:
        if not isinstance(self.data.get("departments"), list):
            return
        users: dict = {}
        for i, d in enumerate(self.data["departments"]):
            for j, m in enumerate((d or {}).get("members") or [] if isinstance(d, dict) else []):
                u = m.get("user") if isinstance(m, dict) else None
                if isinstance(u, str):
                    if u in users:
                        self.err(("departments", i, "members", j, "user"),
                                 f"{u} is a member of {users[u]} already: a user belongs to one department")
                    users.setdefault(u, d.get("slug"))


def calendar_key(kind: str, item: dict) -> tuple | None:
    """What a booking (department, cluster, flavor, start, purpose) or a maintenance window (cluster, start,
    reason) is known by between the file and the database: the rest (GPUs, end, users, nodes, selector) is
    changed in place. None while a part of it is not read yet (an error is reported for it)."""
    names = ("department", "cluster", "flavor", "start", "purpose") if kind == "booking" else (
        "cluster", "start", "reason")
    key = tuple(item.get(n) for n in names)
    if not all(isinstance(k, str) for k in key[:-2]) or not isinstance(key[-1], str) or \
            not isinstance(key[-2], datetime):
        return None
    return key


def check_shape(data: dict, lines: dict) -> list[LabError]:
    """Every error that can be found without changing anything: each section read through the API's input
    serializer for it (types, required and unknown fields, the models' name rules), lending within nominal,
    references to flavors that exist nowhere. The values are left as the API reads them. The rules that need
    the database as it would become (capacity, jobs running on a node) are checked while applying."""
    s = _LabShape(data, lines)
    s.file()
    errors = sorted(s.errors, key=lambda e: e.line or 0)
    if len(errors) > MAX_ERRORS:
        errors[MAX_ERRORS:] = [LabError((), f"{len(errors) - MAX_ERRORS} more error(s) not listed")]
    return errors
