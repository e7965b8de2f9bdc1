"""Reading a lab file: YAML with line numbers, and every error that can be found without changing anything
(types, required and unknown fields, the models' name rules, references). See ``lab.services.labfile``."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from portal.models import SLUG, Department, Role, UserTier, not_reserved, reserved_slugs
from quotas.models import FLAVOR_NAME, RESOURCE_NAME, Flavor
from scheduling.core.policy import PolicyError, policy_from_dict
from scheduling.core.types import TIERS
from scheduling.models import TEMPLATE_NAME, Cluster
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


TEMPLATE_NAME_CHECK = _regex(f"^{TEMPLATE_NAME}$", "Letters, digits, '_', '.', '-' (up to 63), starting alphanumeric.")
CLUSTER_NAME = _regex(r"^[-a-zA-Z0-9_]{1,40}$", "Letters, digits, - and _ (up to 40).")


def check_shape(data: dict, lines: dict) -> list[LabError]:
    """Every error that can be found without changing anything: types, required and unknown fields, the
    models' name rules, lending within nominal, references to flavors that exist nowhere. The rules that
    need the database as it would become (capacity, jobs running on a node) are checked while applying."""
    s = _Shape(lines)
    reserved = reserved_slugs()  # walks the URLconf: once per file, not once per department

    def slug_free(value: str) -> None:
        if value in reserved:
            not_reserved(value)  # its message

    def declared(key: str, name: str) -> set:  # a section that is not a list is reported by its own check
        items = data.get(key)
        return {i[name] for i in items if isinstance(i, dict) and isinstance(i.get(name), str)} \
            if isinstance(items, list) else set()

    known_flavors = set(Flavor.objects.values_list("name", flat=True)) | declared("flavors", "name")
    known_depts = set(Department.objects.values_list("slug", flat=True)) | declared("departments", "slug")
    known_clusters = set(Cluster.objects.values_list("name", flat=True)) | declared("clusters", "name")

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
        s.obj(v, p, {"slug": lambda x, q: s.string(x, q, validators=(SLUG, slug_free)),
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

    templates_seen: dict = {}

    def template(v, p):  # the spec is checked as a submission while applying (its flavor may be new here)
        s.obj(v, p, {"department": s.string,
                     "name": lambda x, q: s.string(x, q, max_length=63, validators=(TEMPLATE_NAME_CHECK,)),
                     "description": lambda x, q: s.string(x, q, max_length=500),
                     "spec": lambda x, q: None if isinstance(x, dict) else s.err(
                         q, "must be a mapping: a job submission body, as for POST /api/v1/jobs")},
              ("department", "name", "spec"))
        if isinstance(v, dict) and isinstance(v.get("department"), str) and v["department"] not in known_depts:
            s.err((*p, "department"), f"no department {v['department']} (declare it under departments:)")
        key = (v.get("department"), v.get("name")) if isinstance(v, dict) else None
        if key and all(isinstance(k, str) for k in key):
            if key in templates_seen:
                s.err((*p, "name"), f"{key[1]} is declared twice for {key[0]} (also item {templates_seen[key] + 1})")
            templates_seen.setdefault(key, p[-1])

    def version(v, p):
        if v != VERSION:
            s.err(p, f"this portal reads lab files of version {VERSION}")

    s.obj(data, (), {"version": version, "flavors": lambda x, q: s.items(x, q, flavor, "name"),
                     "clusters": lambda x, q: s.items(x, q, cluster, "name"),
                     "departments": lambda x, q: s.items(x, q, department, "slug"),
                     "prices": prices, "policy": policy, "sso": sso,
                     "templates": lambda x, q: s.items(x, q, template, None),
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
    errors = sorted(s.errors, key=lambda e: e.line or 0)
    if len(errors) > MAX_ERRORS:
        errors[MAX_ERRORS:] = [LabError((), f"{len(errors) - MAX_ERRORS} more error(s) not listed")]
    return errors




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
