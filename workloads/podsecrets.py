"""A job's department secrets, resolved into plain values the cluster backends render (no Django here).

``PodSecrets`` names Kubernetes Secrets and keys only, except ``owned``: the Secrets the portal writes itself
(a ``value`` secret), whose data travels from the database to the backend that writes it and nowhere else.
Their ``data`` is left out of every ``repr``, so a log line or an error that prints a PodSet never shows it.

Also here, pure: the checks of a job's ``secrets`` list that need no database, and the token warning.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DOCKER_CONFIG_TYPE = "kubernetes.io/dockerconfigjson"
OPAQUE_TYPE = "Opaque"


@dataclass(frozen=True, slots=True)
class SecretEnv:
    """``name`` = key ``key`` of the Kubernetes Secret ``secret`` (env ``valueFrom.secretKeyRef``)."""

    name: str
    secret: str
    key: str


@dataclass(frozen=True, slots=True)
class SecretFiles:
    """Every key of the Kubernetes Secret ``secret`` as a read-only file under ``path``."""

    secret: str
    path: str


@dataclass(frozen=True, slots=True)
class OwnedSecret:
    """A Secret the portal owns and writes (create, or update when it changed) before the pods."""

    name: str
    type: str = OPAQUE_TYPE
    data: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # key -> plain text; never printed
    version: int = 1


@dataclass(frozen=True, slots=True)
class PodSecrets:
    env: tuple[SecretEnv, ...] = ()
    files: tuple[SecretFiles, ...] = ()
    image_pull: tuple[str, ...] = ()  # Secret names, for the pods' imagePullSecrets
    owned: tuple[OwnedSecret, ...] = ()

    @property
    def referenced(self) -> tuple[str, ...]:
        """Every Secret the pods name, sorted."""
        return tuple(sorted({e.secret for e in self.env} | {f.secret for f in self.files} | set(self.image_pull)))


NO_SECRETS = PodSecrets()

# --------------------------------------------------------------------------- a job's "secrets" list, shape
MAX_USES = 20
SECRET_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)
RESERVED_ENV_PREFIXES = ("PORTAL_", "KUBERNETES_", "NVIDIA_")
RESERVED_ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
# Where a secret's files may not go: the kernel's and the devices' trees, and the runtime's own mounts.
FORBIDDEN_PATHS = ("/proc", "/dev", "/sys")
MAX_PATH = 255
PATH_RE = re.compile(r"/[A-Za-z0-9_./-]*", re.ASCII)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def use_problems(uses: object, *, env: Mapping[str, str] = {}, mounts: Iterable[str] = ()) -> list[str]:  # noqa: B006
    """What is wrong with a job's ``secrets`` list, without reading which secrets exist: each item is
    ``{"secret", "key", "env"}`` (one key as an environment variable) or ``{"secret", "path"}`` (every key as
    a file under that directory). ``env``: the job's plain variables; ``mounts``: the job's other mount paths.
    """
    if not isinstance(uses, list):
        return ["A list of {secret, key, env} or {secret, path} items is required."]
    if len(uses) > MAX_USES:
        return [f"At most {MAX_USES} secret uses."]
    problems: list[str] = []
    env_names: list[str] = []
    paths: list[tuple[int, str]] = []
    for i, use in enumerate(uses):
        where = f"Item {i}"
        if not isinstance(use, dict):
            problems.append(f"{where}: an object is required.")
            continue
        unknown = sorted(set(use) - {"secret", "key", "env", "path"})
        if unknown:
            problems.append(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}.")
            continue
        name = use.get("secret")
        if not isinstance(name, str) or not SECRET_NAME_RE.fullmatch(name):
            problems.append(f"{where}: 'secret' must name a department secret (lower-case letters, digits, '-').")
            continue
        if "path" in use:
            if "env" in use or "key" in use:
                problems.append(f"{where}: give either 'key' and 'env' (a variable) or 'path' (files), not both.")
                continue
            path = use["path"]
            problem = _path_problem(path)
            if problem:
                problems.append(f"{where}: {problem}")
            else:
                paths.append((i, path))
            continue
        key, var = use.get("key"), use.get("env")
        if not isinstance(key, str) or not key:
            problems.append(f"{where}: 'key' (which key of the secret) is required with 'env'.")
            continue
        if not isinstance(var, str) or not ENV_NAME_RE.fullmatch(var):
            problems.append(f"{where}: 'env' must be a valid variable name (letters, digits, '_'), "
                            "or give 'path' to mount the secret as files.")
            continue
        if var in RESERVED_ENV_NAMES or var.startswith(RESERVED_ENV_PREFIXES):
            problems.append(f"{where}: {var!r} is reserved for the platform.")
        elif var in env:
            problems.append(f"{where}: {var!r} is also set in 'env'; a variable comes from one place.")
        env_names.append(var)
    for var, n in sorted(Counter(env_names).items()):
        if n > 1:
            problems.append(f"The variable {var!r} is set by {n} secret uses.")
    others = [(None, m) for m in mounts]
    for j, (i, path) in enumerate(paths):
        for k, other in [*paths[:j], *others]:
            if _under(path, other) or _under(other, path):
                problems.append(f"Item {i}: {path!r} overlaps " + (f"item {k}'s {other!r}." if k is not None
                                                                    else f"the mount {other!r}."))
                break
    return problems


def _path_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "'path' must be an absolute directory path."
    if len(path) > MAX_PATH or not PATH_RE.fullmatch(path):
        return f"{path[:60]!r} is not an absolute path of letters, digits, '_', '.', '-' (at most {MAX_PATH})."
    if posixpath.normpath(path) != path or path == "/" or "/./" in path + "/" or "/../" in path + "/":
        return f"{path!r} is not a normalised absolute path (no '..', '//' or trailing '/')."
    for root in FORBIDDEN_PATHS:
        if _under(path, root):
            return f"{path!r} is under {root}, which belongs to the system."
    return None


# --------------------------------------------------------------------------- the token warning
# Shapes of well-known credentials (prefix, what it is). A match is a warning, never a refusal: a value is
# often only an id that looks like a token.
TOKEN_PREFIXES = (
    ("hf_", "a Hugging Face token"),
    ("ghp_", "a GitHub token"), ("gho_", "a GitHub token"), ("ghs_", "a GitHub token"),
    ("github_pat_", "a GitHub token"),
    ("glpat-", "a GitLab token"),
    ("sk-", "an API key (OpenAI-style)"),
    ("xoxb-", "a Slack token"), ("xoxp-", "a Slack token"), ("xoxa-", "a Slack token"),
    ("AKIA", "an AWS access key"), ("ASIA", "an AWS access key"),
)
HEX40 = re.compile(r"[0-9a-f]{40}")  # a Weights & Biases API key
TOKEN_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I)
LONG_RANDOM_MIN = 32
LONG_RANDOM_BITS_PER_CHAR = 4.0


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def token_kind(name: str, value: str) -> str | None:
    """What ``value`` (of variable ``name``) looks like, if it looks like a credential."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    for prefix, what in TOKEN_PREFIXES:
        if text.startswith(prefix) and len(text) >= len(prefix) + 16 and not any(c.isspace() for c in text):
            return what
    if HEX40.fullmatch(text):
        return "a Weights & Biases API key"
    if (len(text) >= LONG_RANDOM_MIN and not any(c.isspace() for c in text) and "/" not in text
            and _entropy(text) >= LONG_RANDOM_BITS_PER_CHAR):
        return "a long random string (a token or key)"
    if TOKEN_NAME_RE.search(name) and len(text) >= 8:
        return "a credential (by its name)"
    return None


def token_warnings(env: Mapping[str, str]) -> list[str]:
    """One warning per plain variable whose value looks like a credential, pointing to secrets. Values are
    never quoted back."""
    out = []
    for name in sorted(env):
        what = token_kind(name, env[name])
        if what:
            out.append(f"env {name} looks like {what}. Plain env is stored and shown in clear: keep it in a "
                       f"department secret and use it as {{\"secret\": ..., \"key\": ..., \"env\": \"{name}\"}} "
                       "(docs/workloads.md, Secrets).")
    return out
