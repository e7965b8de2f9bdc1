"""Read and check the portal's configuration from environment variables (12-factor).

Every setting the portal reads from the environment is declared here once, with its type, default and help.
Bad values stop the process at start-up with one clear message listing every problem, instead of failing
later at the first request. ``python manage.py config`` prints the effective configuration.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


class ConfigError(SystemExit):
    def __init__(self, problems: list[str]):
        text = "Invalid portal configuration:\n" + "\n".join(f"  - {p}" for p in problems)
        super().__init__(text)
        self.problems = problems


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    kind: str = "str"  # str | bool | int | float | choice | url
    choices: tuple[str, ...] = ()
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("DEBUG", "false", "Django debug mode (never in production).", "bool"),
    Setting("SECRET_KEY", "", "Django secret key. Empty: generated once and kept in DATA_DIR/secret_key "
            "(fine for one machine; set it explicitly when several processes run on several hosts).",
            secret=True),
    Setting("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]", "Comma-separated host names the portal serves."),
    Setting("CSRF_TRUSTED_ORIGINS", "", "Comma-separated origins (scheme://host) trusted for CSRF."),
    Setting("DATABASE_URL", "", "PostgreSQL URL, e.g. postgres://user:pw@host:5432/portal. Empty: SQLite "
            "file var/portal.sqlite3 (embedded default).", "url", secret=True),
    Setting("DB_CONN_MAX_AGE", "60", "Seconds a database connection is reused (0: one per request; use 0 with "
            "threaded servers that start a thread per request).", "int"),
    Setting("CELERY_BROKER_URL", "", "Celery broker, e.g. redis://127.0.0.1:6379/0. Empty: kombu filesystem "
            "transport under var/broker (embedded default, no server).", "url", secret=True),
    Setting("REDIS_URL", "", "Redis for the cache and locks; defaults to CELERY_BROKER_URL when it is Redis.",
            "url", secret=True),
    Setting("CELERY_TASK_ALWAYS_EAGER", "false", "Run tasks inline (tests, debugging).", "bool"),
    Setting("SCHEDULING_BACKEND", "simulated", "Cluster backend: simulated or kubernetes.", "choice",
            ("simulated", "kubernetes")),
    Setting("CYCLE_INTERVAL_S", "5", "Seconds between admission cycles (Celery beat).", "float"),
    Setting("RECONCILE_INTERVAL_S", "60", "Seconds between reconciler runs (Celery beat).", "float"),
    Setting("SIM_SPEEDUP", "60", "Simulated cluster: how many simulated seconds pass per real second.",
            "float"),
    Setting("KUBECONFIG", "", "Path to a kubeconfig; empty: in-cluster configuration."),
    Setting("KUBE_NAMESPACE_TEMPLATE", "gpu-{department}", "Namespace of a department's pods."),
    Setting("KUBE_QPS", "20", "Kubernetes client requests per second.", "float"),
    Setting("KUBE_BURST", "40", "Kubernetes client burst.", "int"),
    Setting("API_TOKEN_TTL_DAYS", "90", "Default lifetime of API tokens, in days.", "int"),
    Setting("WHATIF_MAX_JOBS", "1000", "What-if page and command: replay at most this many of the most recent "
            "jobs.", "int"),
    Setting("WHATIF_TIME_LIMIT_S", "20", "What-if: give up after this many seconds for both replays (keep it "
            "under the web server's request timeout).", "float"),
    Setting("LOG_LEVEL", "INFO", "Log level.", "choice", ("DEBUG", "INFO", "WARNING", "ERROR")),
    Setting("SECURE_SSL", "false", "Behind TLS: secure cookies, HSTS, redirect to https.", "bool"),
    Setting("DATA_DIR", str(BASE_DIR / "var"), "Where the embedded defaults keep SQLite, broker and locks."),
    # Single sign-on (OpenID Connect, authorization code flow). Off unless OIDC_RP_CLIENT_ID is set.
    Setting("OIDC_RP_CLIENT_ID", "", "Single sign-on: the portal's client id at the OpenID provider. Empty: "
            "local accounts only."),
    Setting("OIDC_RP_CLIENT_SECRET", "", "Single sign-on: the client secret.", secret=True),
    Setting("OIDC_OP_AUTHORIZATION_ENDPOINT", "", "Single sign-on: the provider's authorization endpoint.",
            "url"),
    Setting("OIDC_OP_TOKEN_ENDPOINT", "", "Single sign-on: the provider's token endpoint.", "url"),
    Setting("OIDC_OP_USER_ENDPOINT", "", "Single sign-on: the provider's userinfo endpoint.", "url"),
    Setting("OIDC_OP_JWKS_ENDPOINT", "", "Single sign-on: the provider's JWKS (keys of its ID tokens).", "url"),
    Setting("OIDC_RP_SIGN_ALGO", "RS256", "Single sign-on: the ID tokens' signature algorithm.", "choice",
            ("RS256", "ES256", "HS256")),
    Setting("OIDC_RP_SCOPES", "openid email profile groups", "Single sign-on: scopes asked for."),
    Setting("OIDC_USERNAME_CLAIM", "preferred_username", "Single sign-on: the claim that is the user name."),
    Setting("OIDC_GROUPS_CLAIM", "groups", "Single sign-on: the claim listing the user's groups."),
    Setting("OIDC_GROUP_MAP", "", "Single sign-on: JSON list of {\"group\", \"department\", \"role\", "
            "\"tier\"}: a user of the group gets that membership at first login (added to the lab file's)."),
    Setting("OIDC_LOGIN_LABEL", "institutional account", "Single sign-on: what the log-in button names."),
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def load(environ: dict[str, str] | None = None) -> dict[str, object]:
    env = os.environ if environ is None else environ
    problems: list[str] = []
    values: dict[str, object] = {}
    for s in SETTINGS:
        raw = env.get(s.name, s.default).strip()
        try:
            values[s.name] = _parse(s, raw)
        except ValueError as exc:
            problems.append(f"{s.name}={raw!r}: {exc}")
    if not problems:
        if values["SECRET_KEY"] and len(str(values["SECRET_KEY"])) < 32:
            problems.append("SECRET_KEY must be at least 32 characters long.")
        db = str(values["DATABASE_URL"])
        if db and urlparse(db).scheme not in {"postgres", "postgresql", "sqlite"}:
            problems.append("DATABASE_URL must be a postgres:// (or sqlite://) URL.")
        broker = str(values["CELERY_BROKER_URL"])
        if broker and urlparse(broker).scheme not in {"redis", "rediss", "filesystem", "memory"}:
            problems.append("CELERY_BROKER_URL must be a redis:// URL (or filesystem:// / memory://).")
        if float(values["CYCLE_INTERVAL_S"]) <= 0 or float(values["SIM_SPEEDUP"]) <= 0:
            problems.append("CYCLE_INTERVAL_S and SIM_SPEEDUP must be positive.")
        if int(values["WHATIF_MAX_JOBS"]) <= 0 or float(values["WHATIF_TIME_LIMIT_S"]) <= 0:
            problems.append("WHATIF_MAX_JOBS and WHATIF_TIME_LIMIT_S must be positive.")
        if "{department}" not in str(values["KUBE_NAMESPACE_TEMPLATE"]):
            problems.append("KUBE_NAMESPACE_TEMPLATE must contain {department}.")
        if values["OIDC_RP_CLIENT_ID"]:
            missing = [n for n in ("OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_TOKEN_ENDPOINT",
                                   "OIDC_OP_USER_ENDPOINT") if not values[n]]
            if values["OIDC_RP_SIGN_ALGO"] != "HS256" and not values["OIDC_OP_JWKS_ENDPOINT"]:
                missing.append("OIDC_OP_JWKS_ENDPOINT")
            if missing:
                problems.append(f"Single sign-on (OIDC_RP_CLIENT_ID set) also needs {', '.join(missing)}.")
        problems.extend(group_map_problems(str(values["OIDC_GROUP_MAP"])))
    if problems:
        raise ConfigError(problems)
    return values


def group_map(raw: str) -> list[dict]:
    """OIDC_GROUP_MAP parsed (an empty list when unset); ``group_map_problems`` says what is wrong with it."""
    return json.loads(raw) if raw.strip() else []


def group_map_problems(raw: str) -> list[str]:
    if not raw.strip():
        return []
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return [f"OIDC_GROUP_MAP is not JSON: {exc}"]
    if not isinstance(data, list):
        return ["OIDC_GROUP_MAP must be a JSON list of {group, department, role, tier}."]
    problems = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("group"), str) or not isinstance(
                item.get("department"), str):
            problems.append(f"OIDC_GROUP_MAP[{i}] needs a group and a department.")
            continue
        unknown = set(item) - {"group", "department", "role", "tier"}
        if unknown:
            problems.append(f"OIDC_GROUP_MAP[{i}]: unknown keys {', '.join(sorted(unknown))}.")
        if item.get("role", "researcher") not in ("researcher", "department_admin", "platform_admin"):
            problems.append(f"OIDC_GROUP_MAP[{i}].role: researcher, department_admin or platform_admin.")
        if item.get("tier", "standard") not in ("standard", "senior", "pi"):
            problems.append(f"OIDC_GROUP_MAP[{i}].tier: standard, senior or pi.")
    return problems


def _parse(s: Setting, raw: str) -> object:
    if s.kind == "bool":
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("expected true or false")
    if s.kind == "int":
        return int(raw)
    if s.kind == "float":
        return float(raw)
    if s.kind == "choice":
        if raw not in s.choices:
            raise ValueError(f"expected one of {', '.join(s.choices)}")
        return raw
    if s.kind == "url" and raw and "://" not in raw:
        raise ValueError("expected a URL like scheme://host")
    return raw


def describe(values: dict[str, object]) -> list[tuple[str, str, str]]:
    rows = []
    for s in SETTINGS:
        v = values.get(s.name, "")
        shown = "***" if s.secret and v else str(v)
        rows.append((s.name, shown, s.help))
    return rows
