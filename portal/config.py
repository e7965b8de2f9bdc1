"""Read and check the portal's configuration from environment variables (12-factor).

Every setting the portal reads from the environment is declared here once, with its type, default and help.
Bad values stop the process at start-up with one clear message listing every problem, instead of failing
later at the first request. ``python manage.py config`` prints the effective configuration.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
# A Kubernetes label value (what an installation's identity is written as on the cluster's objects).
INSTALLATION_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


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
    kind: str = "str"  # str | bool | int | float | choice | url | tiermap
    choices: tuple[str, ...] = ()
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("DEBUG", "false", "Django debug mode (never in production).", "bool"),
    Setting("SECRET_KEY", "", "Django secret key. Empty: generated once and kept in DATA_DIR/secret_key "
            "(fine for one machine; set it explicitly when several processes run on several hosts).",
            secret=True),
    Setting("FIELD_ENCRYPTION_KEYS", "", "Comma-separated keys that encrypt the secrets the portal stores and must "
            "read back (webhook signing secrets): the first encrypts, every one decrypts; rotate by putting a new "
            "key first, running manage.py rotate_field_keys, then dropping the old one. Empty: SECRET_KEY (keep "
            "the old SECRET_KEY here when you change it).", secret=True),
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
    Setting("CYCLE_STALE_AFTER_S", "120", "The scheduler counts as stalled when its last completed admission cycle "
            "is older than this: /readyz answers 503 and platform admins see a banner (0: never).", "float"),
    Setting("SIM_SPEEDUP", "60", "Simulated cluster: how many simulated seconds pass per real second.",
            "float"),
    Setting("KUBECONFIG", "", "Path to a kubeconfig; empty: in-cluster configuration."),
    Setting("KUBE_NAMESPACE_TEMPLATE", "gpu-{department}", "Namespace of a department's pods."),
    Setting("PORTAL_INSTALLATION_ID", "", "This installation's identity on its clusters: every object it writes "
            "carries it as the label gpu-portal.io/installation, and only its own are taken for its jobs (a "
            "label value: letters, digits, '-', '_', '.', at most 63). Empty: generated once and kept in the "
            "database. Two installations sharing a cluster need different ones."),
    Setting("KUBE_QPS", "50", "Kubernetes client requests per second, per process and cluster (kube-scheduler's "
            "own default; the API server's priority and fairness still throttles with 429).", "float"),
    Setting("KUBE_BURST", "100", "Kubernetes client burst, per process and cluster.", "int"),
    Setting("KUBE_CONNECTIONS", "32", "HTTP connections to each cluster's API server a process keeps open: at least "
            "ADMIT_CONCURRENCY x the pod worker's threads, or the extra ones are opened and closed per request.",
            "int"),
    Setting("ADMIT_CONCURRENCY", "8", "Pod workers: how many admissions of one message create their pods at once "
            "(Kubernetes; 1: one after another).", "int"),
    Setting("API_TOKEN_TTL_DAYS", "90", "Default lifetime of API tokens, in days.", "int"),
    Setting("WHATIF_MAX_JOBS", "1000", "What-if page and command: replay at most this many of the most recent "
            "jobs.", "int"),
    Setting("WHATIF_TIME_LIMIT_S", "20", "What-if: give up after this many seconds for both replays (keep it "
            "under the web server's request timeout).", "float"),
    Setting("POLICY_TUNER_INTERVAL_S", "86400", "Seconds between runs of the policy tuner (Celery beat), which "
            "replays the last week under policy changes and proposes the best one to the platform admins "
            "(docs/policy-tuning.md); 0: only on demand.", "float"),
    Setting("POLICY_TUNER_TIME_LIMIT_S", "600", "Policy tuner: give up a run after this many seconds of replays "
            "(the run is kept as failed, with the reason).", "float"),
    Setting("LAB_FILE_MAX_KB", "1024", "manage.py lab apply: refuse a lab file larger than this many KiB.", "int"),
    Setting("QUOTE_ESTIMATE_MAX_JOBS", "20000", "Quote: skip the start estimate (one engine run over a copy of the "
            "queue) when more jobs than this are active or waiting.", "int"),
    Setting("LOG_KEEP_KB", "256", "Job logs: keep the last this many KiB of every attempt's log when it ends.",
            "int"),
    Setting("LOG_RETENTION_DAYS", "30", "Job logs: delete kept logs this many days after their attempt ended.",
            "int"),
    Setting("POD_RESTART_LIMIT", "5", "Roles with failure_policy restart-pod: how many times an attempt's failed "
            "pods are replaced alone; one more failure ends the attempt as any pod's would.", "int"),
    Setting("POD_RESTART_BACKOFF_S", "10", "Roles with failure_policy restart-pod: seconds before a pod that "
            "failed again after its replacement is replaced again, doubled each time, at most 5 minutes; the "
            "first failure is replaced at once.", "int"),
    Setting("CHECKPOINT_RETENTION_DAYS", "14", "Checkpoints: delete a job's checkpoint directory this many days "
            "after the job ended.", "int"),
    Setting("CHECKPOINT_CLEANUP_IMAGE", "busybox:1.36", "Checkpoints: the image of the restricted pod that "
            "deletes an expired checkpoint directory on a Kubernetes cluster."),
    Setting("CHECKPOINT_READ_MOUNTS", "", "Checkpoints: where the portal's workers can read data sources' files "
            "(for TensorBoard logs in checkpoint directories): comma-separated <cluster>/<source>=<local directory "
            "of the source's claim>. Empty: none on Kubernetes clusters (the simulated cluster's are always "
            "readable)."),
    Setting("ARRAY_MAX_TASKS", "1000", "Job arrays: the most tasks one array may have (docs/sweeps.md).", "int"),
    Setting("SHM_DEFAULT_MB", "1024", "Jobs: /dev/shm size (MiB) when a job gives none (at most half its memory).",
            "int"),
    Setting("SHM_MAX_MB", "65536", "Jobs: the largest /dev/shm (MiB) a job may ask for (also at most its memory).",
            "int"),
    Setting("STATS_INTERVAL_S", "300", "Dashboard charts: seconds between two samples of the stored time series.",
            "int"),
    Setting("STATS_RETENTION_DAYS", "90", "Dashboard charts: delete samples older than this many days.", "int"),
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
    Setting("NOTIFY_WEBHOOK_ALLOW", "", "Webhooks: comma-separated receivers allowed although they are not public "
            "(in-cluster or on the LAN): CIDRs or addresses (10.42.0.0/16, fd00::/8, 10.0.0.7: any port), host "
            "names (hooks.ns.svc.cluster.local, *.corp.example: whatever they resolve to) with an optional :port, and "
            "*:port (a public receiver on a port other than 80/443). Empty: public receivers on 80 and 443 only.",
            "allowlist"),
    Setting("NOTIFY_MAX_ATTEMPTS", "6", "Notifications: attempts per delivery before it is marked failed.",
            "int"),
    Setting("NOTIFY_RETRY_BASE_S", "30", "Notifications: first retry delay; it doubles each attempt "
            "(30 s, 1, 2, 4, 8 min ...).", "float"),
    Setting("NOTIFY_SWEEP_INTERVAL_S", "30", "Seconds between sweeps that send pending notifications and "
            "retries (Celery beat), also those written while the broker was down.", "float"),
    Setting("NOTIFY_RETENTION_DAYS", "90", "Notifications: delete events and their deliveries this many days after "
            "they were reported, once nothing is left to send (at least 31, so that a once-per-period event "
            "is never reported twice in one period).", "int"),
    Setting("SESSION_MAX_LIFETIME_S", "43200", "Sessions: the longest lifetime (seconds) a session may ask for; "
            "more is refused (400).", "int"),
    Setting("SESSION_END_WARNING_MINUTES", "15", "Sessions and services: warn the owner (notification and a banner "
            "on the page) this many minutes before the lifetime ends.", "float"),
    Setting("SESSION_IDLE_MINUTES", "60", "Sessions: stop a session whose GPUs stayed idle and that no client "
            "reached for this many minutes (0: never).", "float"),
    Setting("SESSION_DEFAULT_GPU_FRACTION", "", "Sessions: a new session on a GPU type that shares its GPUs, asking "
            "for no fraction of its own and at most one GPU, gets this share of a GPU (a number above 0 and below "
            "1, e.g. 0.25: HAMi memory = share x the GPU's memory, rounded to a whole GiB; replicas: those that "
            "cover the share). Empty: sessions take whole GPUs unless they ask for a fraction."),
    Setting("SESSION_DOMAIN", "sessions.localhost", "Sessions and services: the wildcard domain their hosts are "
            "made under, one origin each: job 42's route is s42.<SESSION_DOMAIN>. A DNS name (not an address), "
            "neither the portal's host nor one above it; its wildcard record and certificate are the operator's "
            "(docs/operations.md). Browsers resolve *.localhost to loopback, so the default needs no DNS."),
    Setting("SESSION_PORT", "8001", "Sessions and services: the port in their routes' URLs (the demo's session "
            "proxy); empty behind an ingress on the scheme's own port (80, or 443 with SECURE_SSL)."),
    Setting("SESSION_INGRESS_CLASS", "", "Kubernetes: the IngressClass of the sessions' and services' Ingresses "
            "(nginx-ingress forward-auth annotations). Empty: no Ingress, only the Service."),
    Setting("SESSION_TLS_SECRET", "", "Kubernetes: the Secret (type kubernetes.io/tls, in every department's "
            "namespace) of the wildcard certificate for *.<SESSION_DOMAIN>, named in each route's Ingress. Empty: "
            "no tls section (the ingress controller's default certificate, or plain HTTP)."),
    Setting("SESSION_PORTAL_SERVICE", "", "Kubernetes: a Service in every department's namespace that reaches the "
            "portal (e.g. ExternalName portal-web.gpu-portal.svc.cluster.local, port named http), for each route's "
            "/s/<id>/_portal/ path. Empty: the operator routes those paths to the portal."),
    Setting("SESSION_INGRESS_STRIP", "true", "Kubernetes: each route's Ingress carries a configuration-snippet "
            "that removes the route's cookie and the Authorization header before the app (ingress-nginx must "
            "allow snippet annotations). false: the app receives them (each good for its own route only).", "bool"),
    Setting("SESSION_AUTH_URL", "", "Kubernetes: the portal's forward-auth address as the ingress controller "
            "reaches it, e.g. http://portal-web.gpu-portal.svc:8000 (empty: PORTAL_URL)."),
    Setting("LOG_LEVEL", "INFO", "Log level.", "choice", ("DEBUG", "INFO", "WARNING", "ERROR")),
    Setting("SECURE_SSL", "false", "Behind TLS: secure cookies, HSTS, redirect to https.", "bool"),
    Setting("DATA_DIR", str(BASE_DIR / "var"), "Where the embedded defaults keep SQLite, broker and locks."),
    # GPU use per job (observability): read from dcgm-exporter's series through Prometheus's HTTP API.
    Setting("PROMETHEUS_URL", "", "Prometheus that scrapes dcgm-exporter, e.g. http://prometheus:9090. Empty: "
            "no GPU use is collected (the simulated backend still draws its own series).", "url"),
    Setting("PROMETHEUS_TIMEOUT_S", "5", "Seconds one Prometheus query may take before the run gives up "
            "(the job pages then show no data).", "float"),
    Setting("GPU_USAGE_INTERVAL_S", "60", "Seconds between runs of the GPU-use collector (Celery beat).",
            "float"),
    Setting("GPU_USAGE_STEP_S", "30", "Finest resolution of the GPU series read (seconds; at least the scrape "
            "interval of dcgm-exporter). Long attempts are read coarser, at most about 1000 samples.", "int"),
    Setting("DCGM_UTIL_METRIC", "DCGM_FI_DEV_GPU_UTIL", "dcgm-exporter series of GPU utilisation (0-100)."),
    Setting("DCGM_FB_USED_METRIC", "DCGM_FI_DEV_FB_USED", "dcgm-exporter series of used GPU memory (MiB)."),
    Setting("DCGM_FB_FREE_METRIC", "DCGM_FI_DEV_FB_FREE", "dcgm-exporter series of free GPU memory (MiB)."),
    Setting("DCGM_ENGINE_ACTIVE_METRIC", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm-exporter profiling series "
            "of graphics-engine activity (0-1), used where present. Empty: not read."),
    Setting("CONTAINER_MEMORY_METRIC", "container_memory_working_set_bytes", "cAdvisor series of a container's "
            "memory (bytes), read for the out-of-memory hint's observed peak. Empty: not read."),
    Setting("DCGM_POD_LABEL", "pod", "Label that carries the pod name on dcgm-exporter's series (exported_pod "
            "when Prometheus renamed it)."),
    Setting("DCGM_NAMESPACE_LABEL", "namespace", "Label that carries the pod's namespace on dcgm-exporter's "
            "series (exported_namespace when Prometheus renamed it)."),
    # A fraction of a GPU shared through HAMi is read from HAMi's per-container series (its vGPU monitor): the
    # per-GPU DCGM figures would count the other pods on its GPU. Defaults: the names HAMi has long exported
    # (its newer hami_* names are the same series under other names and labels, docs/fractions.md).
    Setting("HAMI_UTIL_METRIC", "Device_utilization_desc_of_container", "HAMi series of a container's "
            "utilisation of its GPU (0-100, of the whole GPU). Empty: fractions on HAMi are not read."),
    Setting("HAMI_MEMORY_USED_METRIC", "vGPU_device_memory_usage_in_bytes", "HAMi series of a container's "
            "GPU memory in use (bytes)."),
    Setting("HAMI_MEMORY_LIMIT_METRIC", "vGPU_device_memory_limit_in_bytes", "HAMi series of a container's "
            "GPU memory limit (bytes): the fraction's memory."),
    Setting("HAMI_POD_LABEL", "podname", "Label that carries the pod name on HAMi's series (pod, or "
            "exported_pod, for its hami_* names)."),
    Setting("HAMI_NAMESPACE_LABEL", "podnamespace", "Label that carries the pod's namespace on HAMi's series "
            "(namespace, or exported_namespace, for its hami_* names)."),
    Setting("IDLE_GPU_THRESHOLD_PCT", "5", "A GPU below this utilisation (percent) is idle. One number, or "
            "per tier: realtime=2,elastic=5,backfill=5.", "tiermap"),
    Setting("IDLE_GPU_MINUTES", "30", "A running job whose GPUs all stay idle this many minutes is flagged. One "
            "number, or per tier.", "tiermap"),
    Setting("IDLE_STOP_GRACE_MINUTES", "", "Per tier, e.g. backfill=30: stop a flagged idle job of that tier after "
            "this many more idle minutes (audited). Empty: never stop idle jobs.", "tiermap"),
    # Single sign-on (OpenID Connect, authorization code flow). Off unless OIDC_RP_CLIENT_ID is set.
    Setting("OIDC_RP_CLIENT_ID", "", "Single sign-on: the portal's client id at the OpenID provider. Empty: "
            "local accounts only."),
    Setting("OIDC_RP_CLIENT_SECRET", "", "Single sign-on: the client secret.", secret=True),
    Setting("OIDC_OP_AUTHORIZATION_ENDPOINT", "", "Single sign-on: the provider's authorization endpoint.",
            "url"),
    Setting("OIDC_OP_TOKEN_ENDPOINT", "", "Single sign-on: the provider's token endpoint.", "url"),
    Setting("OIDC_OP_USER_ENDPOINT", "", "Single sign-on: the provider's userinfo endpoint.", "url"),
    Setting("OIDC_OP_JWKS_ENDPOINT", "", "Single sign-on: the provider's JWKS (keys of its ID tokens).", "url"),
    Setting("OIDC_OP_ISSUER", "", "Single sign-on: the provider's issuer (``issuer`` in its discovery "
            "document). ID tokens of another issuer are refused; accounts are matched on (issuer, sub).", "url"),
    Setting("OIDC_OP_LOGOUT_ENDPOINT", "", "Single sign-on: the provider's end_session_endpoint. Set: logging "
            "out of the portal logs out of the provider too. Empty: the portal's session only.", "url"),
    Setting("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", "900", "Single sign-on: how often (seconds) a session is "
            "re-checked at the provider (prompt=none); a user the provider no longer signs in loses it.", "int"),
    Setting("OIDC_RP_SIGN_ALGO", "RS256", "Single sign-on: the ID tokens' signature algorithm.", "choice",
            ("RS256", "ES256", "HS256")),
    Setting("OIDC_RP_SCOPES", "openid email profile groups", "Single sign-on: scopes asked for."),
    Setting("OIDC_USERNAME_CLAIM", "preferred_username", "Single sign-on: the claim that names a new "
            "account and is kept as the display name (never matched: accounts are matched on issuer and sub)."),
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
        if int(values["STATS_INTERVAL_S"]) <= 0 or int(values["STATS_RETENTION_DAYS"]) <= 0:
            problems.append("STATS_INTERVAL_S and STATS_RETENTION_DAYS must be positive.")
        if int(values["LOG_KEEP_KB"]) <= 0 or int(values["LOG_RETENTION_DAYS"]) <= 0:
            problems.append("LOG_KEEP_KB and LOG_RETENTION_DAYS must be positive.")
        if int(values["LAB_FILE_MAX_KB"]) <= 0:
            problems.append("LAB_FILE_MAX_KB must be positive.")
        if int(values["POD_RESTART_LIMIT"]) < 0 or int(values["POD_RESTART_BACKOFF_S"]) < 0:
            problems.append("POD_RESTART_LIMIT and POD_RESTART_BACKOFF_S must be 0 or more.")
        if min(int(values["CHECKPOINT_RETENTION_DAYS"]), int(values["SHM_DEFAULT_MB"]),
               int(values["SHM_MAX_MB"])) <= 0:
            problems.append("CHECKPOINT_RETENTION_DAYS, SHM_DEFAULT_MB and SHM_MAX_MB must be positive.")
        if int(values["ADMIT_CONCURRENCY"]) <= 0 or int(values["KUBE_CONNECTIONS"]) <= 0:
            problems.append("ADMIT_CONCURRENCY and KUBE_CONNECTIONS must be positive.")
        if int(values["WHATIF_MAX_JOBS"]) <= 0 or float(values["WHATIF_TIME_LIMIT_S"]) <= 0:
            problems.append("WHATIF_MAX_JOBS and WHATIF_TIME_LIMIT_S must be positive.")
        if float(values["POLICY_TUNER_INTERVAL_S"]) < 0 or float(values["POLICY_TUNER_TIME_LIMIT_S"]) <= 0:
            problems.append("POLICY_TUNER_INTERVAL_S must not be negative and POLICY_TUNER_TIME_LIMIT_S must be "
                            "positive.")
        if (float(values["PROMETHEUS_TIMEOUT_S"]) <= 0 or float(values["GPU_USAGE_INTERVAL_S"]) <= 0
                or int(values["GPU_USAGE_STEP_S"]) <= 0):
            problems.append("PROMETHEUS_TIMEOUT_S, GPU_USAGE_INTERVAL_S and GPU_USAGE_STEP_S must be positive.")
        for pair in (p.strip() for p in str(values["CHECKPOINT_READ_MOUNTS"]).split(",") if p.strip()):
            key, _, path = pair.partition("=")
            if key.strip().count("/") != 1 or not path.strip().startswith("/"):
                problems.append(f"CHECKPOINT_READ_MOUNTS: {pair!r} is not <cluster>/<source>=<absolute directory>.")
        if values["EMAIL_USE_TLS"] and values["EMAIL_USE_SSL"]:
            problems.append("EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: STARTTLS (587) or implicit TLS (465).")
        if (int(values["NOTIFY_MAX_ATTEMPTS"]) < 1 or float(values["NOTIFY_RETRY_BASE_S"]) <= 0
                or float(values["NOTIFY_SWEEP_INTERVAL_S"]) <= 0 or float(values["NOTIFY_WEBHOOK_TIMEOUT_S"]) <= 0
                or float(values["EMAIL_TIMEOUT_S"]) <= 0):
            problems.append("NOTIFY_MAX_ATTEMPTS, NOTIFY_RETRY_BASE_S, NOTIFY_SWEEP_INTERVAL_S, "
                            "NOTIFY_WEBHOOK_TIMEOUT_S and EMAIL_TIMEOUT_S must be positive.")
        if int(values["NOTIFY_RETENTION_DAYS"]) < 31:
            problems.append("NOTIFY_RETENTION_DAYS must be at least 31: an event reported once per month is "
                            "remembered for the whole month, so it is not reported twice.")
        if urlparse(str(values["PORTAL_URL"])).scheme not in {"http", "https"}:
            problems.append("PORTAL_URL must be an http:// or https:// URL.")
        problems.extend(session_domain_problems(str(values["SESSION_DOMAIN"]), str(values["SESSION_PORT"]),
                                                str(values["PORTAL_URL"]), bool(values["SECURE_SSL"])))
        problems.extend(session_fraction_problems(str(values["SESSION_DEFAULT_GPU_FRACTION"])))
        if "{department}" not in str(values["KUBE_NAMESPACE_TEMPLATE"]):
            problems.append("KUBE_NAMESPACE_TEMPLATE must contain {department}.")
        if values["PORTAL_INSTALLATION_ID"] and not INSTALLATION_ID.fullmatch(str(values["PORTAL_INSTALLATION_ID"])):
            problems.append("PORTAL_INSTALLATION_ID must be a Kubernetes label value: 1-63 letters, digits, '-', "
                            "'_' or '.', beginning and ending with a letter or digit.")
        if values["OIDC_RP_CLIENT_ID"]:
            missing = [n for n in ("OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_TOKEN_ENDPOINT",
                                   "OIDC_OP_USER_ENDPOINT", "OIDC_OP_ISSUER") if not values[n]]
            if values["OIDC_RP_SIGN_ALGO"] != "HS256" and not values["OIDC_OP_JWKS_ENDPOINT"]:
                missing.append("OIDC_OP_JWKS_ENDPOINT")
            if missing:
                problems.append(f"Single sign-on (OIDC_RP_CLIENT_ID set) also needs {', '.join(missing)}.")
        if int(values["OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"]) <= 0:
            problems.append("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS must be positive.")
        problems.extend(group_map_problems(str(values["OIDC_GROUP_MAP"])))
    if problems:
        raise ConfigError(problems)
    return values


_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def session_domain_problems(domain: str, port: str, portal_url: str, secure: bool) -> list[str]:
    """What is wrong with the sessions' wildcard domain: each session's host must be an origin of its own,
    whose cookies never reach the portal and whose pages cannot plant one there."""
    labels = domain.lower().split(".")
    if not domain or domain != domain.lower() or not all(_DNS_LABEL.match(label) for label in labels) \
            or labels[-1].isdigit():
        return [f"SESSION_DOMAIN must be a lower-case DNS name such as sessions.lab.example, got {domain!r}."]
    problems = []
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        problems.append(f"SESSION_PORT must be a port number (1-65535) or empty, got {port!r}.")
    portal_host = (urlparse(portal_url).hostname or "").lower()
    if portal_host == domain or portal_host.endswith("." + domain):
        problems.append(f"SESSION_DOMAIN ({domain}) must not hold the portal's host ({portal_host}): a session "
                        "would share its cookies.")
    elif domain.endswith("." + portal_host) and not secure:
        problems.append(f"SESSION_DOMAIN ({domain}) lies below the portal's host ({portal_host}): without TLS "
                        "(SECURE_SSL, whose __Host- cookies a sub-domain cannot overwrite) a session's page could "
                        "plant cookies in the portal. Use a domain apart from the portal's, or TLS.")
    return problems


def session_fraction(raw: str) -> float | None:
    """SESSION_DEFAULT_GPU_FRACTION as a share of a GPU (None: off); assumes it passed the checks."""
    return float(raw) if raw.strip() else None


def session_fraction_problems(raw: str) -> list[str]:
    if not raw.strip():
        return []
    try:
        share = float(raw)
    except ValueError:
        share = float("nan")
    if not 0 < share < 1:  # also refuses nan and inf
        return [f"SESSION_DEFAULT_GPU_FRACTION={raw!r} must be a share of one GPU above 0 and below 1 "
                "(e.g. 0.25), or empty (off)."]
    return []


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
    if s.kind == "tiermap":
        return _tiermap(raw)
    if s.kind == "allowlist":
        webhook_allow(raw)  # checked here; kept as the text it is, parsed where it is used
        return raw
    if s.kind == "url" and raw and "://" not in raw:
        raise ValueError("expected a URL like scheme://host")
    return raw


def _tiermap(raw: str) -> dict[str, float]:
    """"5" -> {"*": 5.0}; "backfill=30,elastic=60" -> {"backfill": 30.0, "elastic": 60.0}; "" -> {}.
    The tier names are checked against the scheduling core's list by the settings (this module imports no app).
    """
    out: dict[str, float] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, number = (key.strip(), value) if sep else ("*", key)
        try:
            out[key] = float(number)
        except ValueError:
            raise ValueError("expected a number or tier=number pairs, e.g. backfill=30,elastic=60")
        if not out[key] >= 0:
            raise ValueError("numbers must be zero or positive")
    return out


@dataclass(frozen=True)
class EgressAllow:
    """NOTIFY_WEBHOOK_ALLOW parsed: networks (any port), host names or ``*.suffix`` patterns with an optional
    port (None: any), and extra ports allowed on public addresses."""

    networks: tuple = ()
    names: tuple[tuple[str, int | None], ...] = ()
    public_ports: frozenset[int] = frozenset()


@functools.lru_cache(maxsize=16)
def webhook_allow(raw: str) -> EgressAllow:
    """Parse NOTIFY_WEBHOOK_ALLOW; a ValueError names the first entry that is not a CIDR, an address, a host
    name (``*.`` allowed in front) with an optional ``:port``, or ``*:port``."""
    networks, names, ports = [], [], set()
    for entry in (e.strip().lower() for e in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        host, sep, port_text = entry.rpartition(":") if not entry.startswith("[") else (entry, "", "")
        if not sep:
            host, port_text = entry, ""
        port = None
        if sep:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
            port = int(port_text)
        if host == "*":
            if port is None:
                raise ValueError(f"{entry!r}: * needs a port (*:8443)")
            ports.add(port)
            continue
        name = host.removeprefix("*.").rstrip(".")
        if not _HOST_NAME.fullmatch(name):
            raise ValueError(f"{entry!r}: expected a CIDR (10.42.0.0/16), an address, a host name[:port] or *:port")
        names.append((host.rstrip("."), port))
    return EgressAllow(networks=tuple(networks), names=tuple(names), public_ports=frozenset(ports))


_HOST_NAME = re.compile(r"(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*")


MASK = "***"
# A URL's query parameters that carry a credential (``?password=``, ``?token=``, ``?access_key=`` ...).
_SECRET_PARAM = re.compile(r"pass|secret|token|key|auth|credential|signature", re.I)


def mask_url(value: str) -> str:
    """A URL as an operator may read it: its password (``user:***@host``) and any credential in its query
    masked, the rest as it is (which server, which database, which port), so a wrong host shows."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - a malformed port raises here, and then nothing of it is shown
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{host}"
    query = "&".join(f"{k}={MASK}" if _SECRET_PARAM.search(k) else f"{k}={v}" if v or "=" in pair else k
                     for pair in parts.query.split("&") if pair
                     for k, _, v in [pair.partition("=")])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def shown_value(setting: Setting, value: str) -> str:
    """How ``manage.py config`` shows a setting: a URL with its credentials masked (a broker's or a database's
    host is worth seeing, its password never), any other secret (keys, client secrets, passwords) masked whole."""
    if not value:
        return value
    if setting.kind == "url" or (not setting.secret and "://" in value):
        # every URL, flagged secret or not: a Prometheus or an auth URL may carry a password too
        return mask_url(value)
    return MASK if setting.secret else value  # (a key that happens to hold "://" stays masked whole)


def describe(values: dict[str, object]) -> list[tuple[str, str, str]]:
    rows = []
    for s in SETTINGS:
        v = values.get(s.name, "")
        if isinstance(v, dict):
            v = ",".join(f"{k}={n:g}" if k != "*" else f"{n:g}" for k, n in v.items())
        rows.append((s.name, shown_value(s, str(v)), s.help))
    return rows
