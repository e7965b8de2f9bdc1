"""Read and check the portal's configuration from environment variables (12-factor).

Every setting the portal reads from the environment is declared here once, with its type, default and help.
Bad values stop the process at start-up with one clear message listing every problem, instead of failing
later at the first request. ``python manage.py config`` prints the effective configuration.
"""

from __future__ import annotations

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
    Setting("PORTAL_URL", "http://127.0.0.1:8000", "The portal's public address (scheme://host[:port]), for "
            "links in notifications (the job, unsubscribe).", "url"),
    Setting("EMAIL_HOST", "", "SMTP server for notification e-mails. Empty: e-mails are written as files "
            "under DATA_DIR/mail (embedded default, nothing is sent)."),
    Setting("EMAIL_PORT", "587", "SMTP port.", "int"),
    Setting("EMAIL_HOST_USER", "", "SMTP user name (empty: no authentication)."),
    Setting("EMAIL_HOST_PASSWORD", "", "SMTP password.", secret=True),
    Setting("EMAIL_USE_TLS", "true", "SMTP: STARTTLS after connecting (port 587).", "bool"),
    Setting("EMAIL_USE_SSL", "false", "SMTP: implicit TLS from the start (port 465); not with EMAIL_USE_TLS.",
            "bool"),
    Setting("EMAIL_TIMEOUT_S", "10", "SMTP: seconds before a connection or a command gives up.", "float"),
    Setting("DEFAULT_FROM_EMAIL", "GPU portal <gpu-portal@localhost>", "Sender of notification e-mails."),
    Setting("NOTIFY_WEBHOOK_TIMEOUT_S", "5", "Webhooks: seconds before a POST to a receiver gives up.",
            "float"),
    Setting("NOTIFY_MAX_ATTEMPTS", "6", "Notifications: attempts per delivery before it is marked failed.",
            "int"),
    Setting("NOTIFY_RETRY_BASE_S", "30", "Notifications: first retry delay; it doubles each attempt "
            "(30 s, 1, 2, 4, 8 min ...).", "float"),
    Setting("NOTIFY_SWEEP_INTERVAL_S", "30", "Seconds between sweeps that send pending notifications and "
            "retries (Celery beat), also those written while the broker was down.", "float"),
    Setting("LOG_LEVEL", "INFO", "Log level.", "choice", ("DEBUG", "INFO", "WARNING", "ERROR")),
    Setting("SECURE_SSL", "false", "Behind TLS: secure cookies, HSTS, redirect to https.", "bool"),
    Setting("DATA_DIR", str(BASE_DIR / "var"), "Where the embedded defaults keep SQLite, broker and locks."),
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
        if values["EMAIL_USE_TLS"] and values["EMAIL_USE_SSL"]:
            problems.append("EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: STARTTLS (587) or implicit TLS (465).")
        if (int(values["NOTIFY_MAX_ATTEMPTS"]) < 1 or float(values["NOTIFY_RETRY_BASE_S"]) <= 0
                or float(values["NOTIFY_SWEEP_INTERVAL_S"]) <= 0 or float(values["NOTIFY_WEBHOOK_TIMEOUT_S"]) <= 0
                or float(values["EMAIL_TIMEOUT_S"]) <= 0):
            problems.append("NOTIFY_MAX_ATTEMPTS, NOTIFY_RETRY_BASE_S, NOTIFY_SWEEP_INTERVAL_S, "
                            "NOTIFY_WEBHOOK_TIMEOUT_S and EMAIL_TIMEOUT_S must be positive.")
        if urlparse(str(values["PORTAL_URL"])).scheme not in {"http", "https"}:
            problems.append("PORTAL_URL must be an http:// or https:// URL.")
        if "{department}" not in str(values["KUBE_NAMESPACE_TEMPLATE"]):
            problems.append("KUBE_NAMESPACE_TEMPLATE must contain {department}.")
    if problems:
        raise ConfigError(problems)
    return values


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
