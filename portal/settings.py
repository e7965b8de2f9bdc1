"""Django settings. Every value that varies per deployment comes from portal.config (environment)."""

from __future__ import annotations

import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url

from portal import config

ENV = config.load()
BASE_DIR = config.BASE_DIR
DATA_DIR = Path(str(ENV["DATA_DIR"]))
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    if ENV["SECRET_KEY"]:
        return str(ENV["SECRET_KEY"])
    path = DATA_DIR / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
# Stored secrets are encrypted with these (portal/crypto.py): the first encrypts, every one decrypts.
FIELD_ENCRYPTION_KEYS = [k.strip() for k in str(ENV["FIELD_ENCRYPTION_KEYS"]).split(",") if k.strip()] or [SECRET_KEY]
DEBUG = bool(ENV["DEBUG"])
ALLOWED_HOSTS = [h.strip() for h in str(ENV["ALLOWED_HOSTS"]).split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in str(ENV["CSRF_TRUSTED_ORIGINS"]).split(",") if o.strip()]
TESTING = "pytest" in sys.modules

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_prometheus",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "portal",
    "quotas",
    "workloads",
    "scheduling",
    "observability",
    "notifications",
    "lab",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "portal.middleware.ProbeMiddleware",  # /healthz, /readyz: answered whatever the Host header says
    "portal.middleware.HostileInputMiddleware",  # NUL characters, oversized bodies: a JSON 400 at the door
    "portal.middleware.SessionHosts",  # a session's host reaches its route's /_portal/ paths, nothing else
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.sso.SessionRefresh",  # single sign-on sessions re-checked at the provider (off without SSO)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.lockout.DeviceCookieMiddleware",  # a browser that has just signed in gets its device cookie
    "axes.middleware.AxesMiddleware",  # turns a lockout into the response of portal.lockout
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The shell (portal/base.html) and the partials several apps include live in the top-level
        # templates/ folder; each app keeps its own pages in <app>/templates/<app>/.
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context.membership",
                "portal.sso.context",
            ]
        },
    }
]

# ------------------------------------------------------------------------------------------ database
if ENV["DATABASE_URL"]:
    DATABASES = {"default": dj_database_url.parse(str(ENV["DATABASE_URL"]), conn_max_age=int(ENV["DB_CONN_MAX_AGE"]))}
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        DATABASES["default"]["ENGINE"] = "django_prometheus.db.backends.postgresql"
else:
    DATABASES = {
        "default": {
            "ENGINE": "django_prometheus.db.backends.sqlite3",
            "NAME": DATA_DIR / "portal.sqlite3",
            # WAL + IMMEDIATE: the web process and the worker write concurrently on one laptop.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# A reused connection is checked before its first query in each request or task, so a connection the server
# ended (a restart, a failover, an idle timeout) is replaced instead of failing that request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
IS_POSTGRES = "postgresql" in DATABASES["default"]["ENGINE"]

# ------------------------------------------------------------------------------------------ cache / redis
REDIS_URL = str(ENV["REDIS_URL"]) or (
    str(ENV["CELERY_BROKER_URL"]) if str(ENV["CELERY_BROKER_URL"]).startswith("redis") else ""
)
if REDIS_URL:
    # Short timeouts: with Redis down, a request that uses the cache (the submit throttle) must fail over in
    # about a second, not hang until the web server's worker timeout.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# ------------------------------------------------------------------------------------------ celery
CELERY_BROKER_URL = str(ENV["CELERY_BROKER_URL"]) or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    # filesystem:// is kombu's filesystem transport with atomic writes (portal/fsbroker.py): kombu's own lets
    # the worker read a message its writer has not filled yet, and the worker dies of it under load.
    from portal import fsbroker

    fsbroker.register()
    _broker_dir = DATA_DIR / "broker"
    for sub in ("out", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),  # claimed messages: same file system, atomic rename
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith("redis"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
# A web request that sends a task after commit gives up on an unreachable broker within a few seconds; the
# job is already committed, and the reconciler sends what was lost (see docs/operations.md, failure modes).
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5,
                                    "interval_max": 1}
CELERY_TASK_ALWAYS_EAGER = bool(ENV["CELERY_TASK_ALWAYS_EAGER"])
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True  # a task whose worker dies is redelivered; every task is idempotent
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 120
CELERY_TASK_DEFAULT_QUEUE = "default"
# Connections are recycled by portal.celery like Django's request cycle does (DB_CONN_MAX_AGE); this stops
# Celery's own fix-up from closing them around every task (it only closes after this many tasks).
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_TASK_ROUTES = {
    "scheduling.cycle.*": {"queue": "cycle"},
    # Starting admitted jobs' pods has a queue of its own, which every pod worker reads first: an admitted job
    # holds its GPUs and its department's quota until its pods start, and behind the clean-up of ended attempts
    # (a remove and a copy of the log per attempt, thousands after a busy hour) starts waited minutes in one
    # first-in first-out queue while the queue behind them could not use the GPUs. Exact names are matched
    # before the pattern below.
    "scheduling.pods.admit": {"queue": "starts"},
    "scheduling.pods.admit_many": {"queue": "starts"},
    "scheduling.pods.*": {"queue": "pods"},
    # Delivery (e-mail, webhooks: network waits of seconds) on its own queue, so that a burst of notifications
    # never sits in front of the pod work that starts admitted jobs; run it on its own worker to scale it apart.
    "notifications.*": {"queue": "notifications"},
}
CELERY_BEAT_SCHEDULE = {
    # A cycle or sync still queued after ten intervals is dropped: later ones read the world afresh, and a
    # worker slower than the beat must not build an ever longer backlog of stale ones.
    "admission-cycle": {"task": "scheduling.cycle.run", "schedule": float(ENV["CYCLE_INTERVAL_S"]),
                        "options": {"expires": 10 * float(ENV["CYCLE_INTERVAL_S"])}},
    "sync-cluster": {"task": "scheduling.cycle.sync", "schedule": float(ENV["CYCLE_INTERVAL_S"]),
                     "options": {"expires": 10 * float(ENV["CYCLE_INTERVAL_S"])}},
    "reconcile": {"task": "scheduling.cycle.reconcile", "schedule": float(ENV["RECONCILE_INTERVAL_S"])},
    # budgets (quotas.tasks): refills happen once per department and period however often this fires
    "quotas-refill": {"task": "quotas.refill", "schedule": 3600.0},
    "quotas-check-ledger": {"task": "quotas.check_ledger", "schedule": 900.0},
    "quotas-reconcile-holds": {"task": "quotas.reconcile_holds", "schedule": 600.0},
    # kept job logs past LOG_RETENTION_DAYS
    "scheduling-logs-cleanup": {"task": "scheduling.logs.cleanup", "schedule": 3600.0},
    # checkpoint directories past CHECKPOINT_RETENTION_DAYS after their job ended (docs/workloads.md)
    "scheduling-checkpoints-cleanup": {"task": "scheduling.checkpoints.cleanup", "schedule": 3600.0},
    # the dashboard's time series (charts read samples, never every job's history)
    "scheduling-stats-sample": {"task": "scheduling.stats.sample", "schedule": float(ENV["STATS_INTERVAL_S"])},
    # GPU use per job (observability.tasks): reads Prometheus (or the simulated cluster's series) afresh each run
    "observability-collect": {"task": "observability.collect", "schedule": float(ENV["GPU_USAGE_INTERVAL_S"]),
                              "options": {"expires": 2 * float(ENV["GPU_USAGE_INTERVAL_S"])}},
    # notifications: the outbox's rows that no message announced (written while the broker was down) and the
    # retries that are due; a delivery is claimed by one worker, so overlapping sweeps send nothing twice
    "notifications-sweep": {"task": "notifications.sweep", "schedule": float(ENV["NOTIFY_SWEEP_INTERVAL_S"]),
                            "options": {"expires": 10 * float(ENV["NOTIFY_SWEEP_INTERVAL_S"])}},
    # reported events and their deliveries past NOTIFY_RETENTION_DAYS, once nothing is left to send
    "notifications-cleanup": {"task": "notifications.cleanup", "schedule": 3600.0},
    # sessions and services about to reach their lifetime: warned once, SESSION_END_WARNING_MINUTES ahead
    "scheduling-sessions-warn": {"task": "scheduling.sessions.warn_ending", "schedule": 60.0},
    # the calendar's notices: running jobs a maintenance window ahead affects, bookings that began (once each)
    "scheduling-calendar-notify": {"task": "scheduling.calendar.notify", "schedule": 60.0},
}
# the policy tuner (scheduling.services.tuning): daily by default, off at 0 (on demand only)
if float(ENV["POLICY_TUNER_INTERVAL_S"]) > 0:
    CELERY_BEAT_SCHEDULE["scheduling-policy-tuner"] = {
        "task": "scheduling.tuning.run", "schedule": float(ENV["POLICY_TUNER_INTERVAL_S"]),
        "options": {"expires": float(ENV["POLICY_TUNER_INTERVAL_S"])}}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# Beat writes its schedule file after every task it sends: the file's age is beat's liveness (portal.heartbeat).
CELERY_BEAT_SYNC_EVERY = 1

# ------------------------------------------------------------------------------------------ scheduling
SCHEDULING_BACKEND = str(ENV["SCHEDULING_BACKEND"])
CYCLE_STALE_AFTER_S = float(ENV["CYCLE_STALE_AFTER_S"])
SIM_SPEEDUP = float(ENV["SIM_SPEEDUP"])
# The simulated cluster's clock (scheduling.backends.clock): None is real time. Not from the environment: the
# tests set a ManualClock here so that their simulated pods move only when a test advances time.
SIM_CLOCK = None
KUBECONFIG = str(ENV["KUBECONFIG"])
KUBE_NAMESPACE_TEMPLATE = str(ENV["KUBE_NAMESPACE_TEMPLATE"])
PORTAL_INSTALLATION_ID = str(ENV["PORTAL_INSTALLATION_ID"])
KUBE_QPS = float(ENV["KUBE_QPS"])
KUBE_BURST = int(ENV["KUBE_BURST"])
KUBE_CONNECTIONS = int(ENV["KUBE_CONNECTIONS"])
ADMIT_CONCURRENCY = int(ENV["ADMIT_CONCURRENCY"])
API_TOKEN_TTL_DAYS = int(ENV["API_TOKEN_TTL_DAYS"])
WHATIF_MAX_JOBS = int(ENV["WHATIF_MAX_JOBS"])
WHATIF_TIME_LIMIT_S = float(ENV["WHATIF_TIME_LIMIT_S"])
POLICY_TUNER_TIME_LIMIT_S = float(ENV["POLICY_TUNER_TIME_LIMIT_S"])
POLICY_TUNER_INTERVAL_S = float(ENV["POLICY_TUNER_INTERVAL_S"])
LAB_FILE_MAX_KB = int(ENV["LAB_FILE_MAX_KB"])
QUOTE_ESTIMATE_MAX_JOBS = int(ENV["QUOTE_ESTIMATE_MAX_JOBS"])
LOG_KEEP_KB = int(ENV["LOG_KEEP_KB"])
LOG_RETENTION_DAYS = int(ENV["LOG_RETENTION_DAYS"])
POD_RESTART_LIMIT = int(ENV["POD_RESTART_LIMIT"])
POD_RESTART_BACKOFF_S = int(ENV["POD_RESTART_BACKOFF_S"])
CHECKPOINT_RETENTION_DAYS = int(ENV["CHECKPOINT_RETENTION_DAYS"])
CHECKPOINT_CLEANUP_IMAGE = str(ENV["CHECKPOINT_CLEANUP_IMAGE"])
# "<cluster>/<source>" -> the local directory where the portal's workers mount that source's claim
CHECKPOINT_READ_MOUNTS = {
    key.strip(): path.strip()
    for key, _, path in (pair.partition("=") for pair in str(ENV["CHECKPOINT_READ_MOUNTS"]).split(",") if pair.strip())
}
ARRAY_MAX_TASKS = int(ENV["ARRAY_MAX_TASKS"])
SHM_DEFAULT_MB = int(ENV["SHM_DEFAULT_MB"])
SHM_MAX_MB = int(ENV["SHM_MAX_MB"])
STATS_INTERVAL_S = int(ENV["STATS_INTERVAL_S"])
STATS_RETENTION_DAYS = int(ENV["STATS_RETENTION_DAYS"])

# ------------------------------------------------------------------------------------------ observability
PROMETHEUS_URL = str(ENV["PROMETHEUS_URL"]).rstrip("/")
PROMETHEUS_TIMEOUT_S = float(ENV["PROMETHEUS_TIMEOUT_S"])
DCGM_METRICS = {
    "util": str(ENV["DCGM_UTIL_METRIC"]),
    "fb_used": str(ENV["DCGM_FB_USED_METRIC"]),
    "fb_free": str(ENV["DCGM_FB_FREE_METRIC"]),
    "engine_active": str(ENV["DCGM_ENGINE_ACTIVE_METRIC"]),
}
GPU_USAGE_STEP_S = int(ENV["GPU_USAGE_STEP_S"])
CONTAINER_MEMORY_METRIC = str(ENV["CONTAINER_MEMORY_METRIC"])
DCGM_POD_LABEL = str(ENV["DCGM_POD_LABEL"])
DCGM_NAMESPACE_LABEL = str(ENV["DCGM_NAMESPACE_LABEL"])
HAMI_METRICS = {
    "util": str(ENV["HAMI_UTIL_METRIC"]),
    "memory_used": str(ENV["HAMI_MEMORY_USED_METRIC"]),
    "memory_limit": str(ENV["HAMI_MEMORY_LIMIT_METRIC"]),
}
HAMI_POD_LABEL = str(ENV["HAMI_POD_LABEL"])
HAMI_NAMESPACE_LABEL = str(ENV["HAMI_NAMESPACE_LABEL"])


def _per_tier(name: str) -> dict[str, float]:
    """A per-tier setting as written: tier -> value, "*" meaning every tier not named. The tier names are the
    scheduling core's; observability resolves "*" and refuses unknown names at start-up (its system check), so
    the settings import no app."""
    return dict(ENV[name])


IDLE_GPU_THRESHOLD_PCT = _per_tier("IDLE_GPU_THRESHOLD_PCT")
IDLE_GPU_MINUTES = _per_tier("IDLE_GPU_MINUTES")
IDLE_STOP_GRACE_MINUTES = _per_tier("IDLE_STOP_GRACE_MINUTES")  # a tier not named is never stopped

# ------------------------------------------------------------------------------------------ sessions and services
SESSION_MAX_LIFETIME_S = int(ENV["SESSION_MAX_LIFETIME_S"])
SESSION_END_WARNING_MINUTES = float(ENV["SESSION_END_WARNING_MINUTES"])
SESSION_IDLE_MINUTES = float(ENV["SESSION_IDLE_MINUTES"])
SESSION_DEFAULT_GPU_FRACTION = config.session_fraction(str(ENV["SESSION_DEFAULT_GPU_FRACTION"]))
SESSION_DOMAIN = str(ENV["SESSION_DOMAIN"])
SESSION_PORT = str(ENV["SESSION_PORT"])
SESSION_INGRESS_CLASS = str(ENV["SESSION_INGRESS_CLASS"])
SESSION_AUTH_URL = str(ENV["SESSION_AUTH_URL"]).rstrip("/")
SESSION_TLS_SECRET = str(ENV["SESSION_TLS_SECRET"])
SESSION_PORTAL_SERVICE = str(ENV["SESSION_PORTAL_SERVICE"])
SESSION_INGRESS_STRIP = bool(ENV["SESSION_INGRESS_STRIP"])
# The simulated cluster runs a small HTTP + WebSocket stand-in process for each running session or service pod
# (scheduling/backends/standin.py). Off in the tests unless a test turns it on: they need no processes.
SIM_SESSION_STANDIN = True

# ------------------------------------------------------------------------------------------ notifications
PORTAL_URL = str(ENV["PORTAL_URL"]).rstrip("/")
if ENV["EMAIL_HOST"]:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
else:  # embedded default: every e-mail is a file to read, nothing leaves the machine
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = DATA_DIR / "mail"
EMAIL_HOST = str(ENV["EMAIL_HOST"]) or "localhost"
EMAIL_PORT = int(ENV["EMAIL_PORT"])
EMAIL_HOST_USER = str(ENV["EMAIL_HOST_USER"])
EMAIL_HOST_PASSWORD = str(ENV["EMAIL_HOST_PASSWORD"])
EMAIL_USE_TLS = bool(ENV["EMAIL_USE_TLS"])
EMAIL_USE_SSL = bool(ENV["EMAIL_USE_SSL"])
EMAIL_TIMEOUT = float(ENV["EMAIL_TIMEOUT_S"])
DEFAULT_FROM_EMAIL = str(ENV["DEFAULT_FROM_EMAIL"])
NOTIFY_WEBHOOK_TIMEOUT_S = float(ENV["NOTIFY_WEBHOOK_TIMEOUT_S"])
NOTIFY_WEBHOOK_ALLOW = str(ENV["NOTIFY_WEBHOOK_ALLOW"])  # parsed by portal.config.webhook_allow
NOTIFY_MAX_ATTEMPTS = int(ENV["NOTIFY_MAX_ATTEMPTS"])
NOTIFY_RETENTION_DAYS = int(ENV["NOTIFY_RETENTION_DAYS"])
NOTIFY_RETRY_BASE_S = float(ENV["NOTIFY_RETRY_BASE_S"])
LOCK_DIR = DATA_DIR / "locks"
LOCK_DIR.mkdir(exist_ok=True)

# ------------------------------------------------------------------------------------------ auth
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Log-in throttling (portal/lockout.py, docs/operations.md): django-axes counts failures in the database (so it
# works with Redis down); portal.lockout.LoginThrottleBackend refuses a paused sign-in before the password is
# checked: from an unknown device once the account name or the address is over the limit, from a browser with
# a device cookie only once that cookie is.
AUTHENTICATION_BACKENDS = ["portal.lockout.LoginThrottleBackend", "django.contrib.auth.backends.ModelBackend"]

# Single sign-on with OpenID Connect (mozilla-django-oidc, portal/sso.py): off unless a client id is configured.
# Local accounts keep working beside it (the demo, break-glass admins), and so do API tokens.
SSO_ENABLED = bool(ENV["OIDC_RP_CLIENT_ID"])
OIDC_RP_CLIENT_ID = str(ENV["OIDC_RP_CLIENT_ID"])
OIDC_RP_CLIENT_SECRET = str(ENV["OIDC_RP_CLIENT_SECRET"])
OIDC_OP_AUTHORIZATION_ENDPOINT = str(ENV["OIDC_OP_AUTHORIZATION_ENDPOINT"])
OIDC_OP_TOKEN_ENDPOINT = str(ENV["OIDC_OP_TOKEN_ENDPOINT"])
OIDC_OP_USER_ENDPOINT = str(ENV["OIDC_OP_USER_ENDPOINT"])
OIDC_OP_JWKS_ENDPOINT = str(ENV["OIDC_OP_JWKS_ENDPOINT"])
OIDC_OP_ISSUER = str(ENV["OIDC_OP_ISSUER"])
OIDC_OP_LOGOUT_ENDPOINT = str(ENV["OIDC_OP_LOGOUT_ENDPOINT"])
# SessionRefresh (portal.sso.SessionRefresh) re-checks a session at the provider after this many seconds.
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = int(ENV["OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"])
# The ID token is kept in the session as the id_token_hint of the provider's logout (portal.sso.provider_logout_url).
OIDC_STORE_ID_TOKEN = True
OIDC_OP_LOGOUT_URL_METHOD = "portal.sso.provider_logout_url"
OIDC_RP_SIGN_ALGO = str(ENV["OIDC_RP_SIGN_ALGO"])
OIDC_RP_SCOPES = str(ENV["OIDC_RP_SCOPES"])
OIDC_USERNAME_CLAIM = str(ENV["OIDC_USERNAME_CLAIM"])
OIDC_GROUPS_CLAIM = str(ENV["OIDC_GROUPS_CLAIM"])
OIDC_GROUP_MAP = config.group_map(str(ENV["OIDC_GROUP_MAP"]))
OIDC_LOGIN_LABEL = str(ENV["OIDC_LOGIN_LABEL"])
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
if SSO_ENABLED:
    AUTHENTICATION_BACKENDS.append("portal.sso.PortalOIDCBackend")
AXES_FAILURE_LIMIT = 10
AXES_COOLOFF_TIME = timedelta(minutes=15)
# A device's failures count against the device alone; an account name's (from unknown devices) and a token's
# key id's against themselves and the client's address.
AXES_LOCKOUT_PARAMETERS = "portal.lockout.lockout_parameters"
AXES_USERNAME_CALLABLE = "portal.lockout.counted_key"
AXES_RESET_ON_SUCCESS = False  # portal.lockout resets the count a success was judged by, never the address's
# A refused attempt is not counted: the lock ends a cool-off after the last failure that was checked.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# The device cookie a successful sign-in leaves in the browser (OWASP's device cookies, portal.lockout).
LOGIN_DEVICE_COOKIE_AGE = timedelta(days=90)
LOGIN_DEVICE_COOKIE_NAME = "portal_device"
AXES_LOCKOUT_CALLABLE = "portal.lockout.lockout_response"
AXES_SENSITIVE_PARAMETERS = ["password", "token"]
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["portal.api.JSONParser"],  # refuses NUL and absurd nesting with a 400
    "DEFAULT_THROTTLE_RATES": {"submit": "120/min", "quote": "120/min"},  # jobs per user, a batch counts each of its jobs
    "UNAUTHENTICATED_USER": None,
}
JOBS_BATCH_MAX = 500  # most jobs in one POST /api/v1/jobs/batch (docs/api.md)
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU portal API",
    "DESCRIPTION": "Submit and follow GPU jobs; read quotas, flavors and departments.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # One tag per resource (the path's first segment after /api/v1/): the docs group operations by it.
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "TAGS": [
        {"name": "jobs", "description": "Submit, quote, follow, cancel jobs; their logs."},
        {"name": "cluster", "description": "GPUs per type: total, used, free, fragmentation."},
        {"name": "policy", "description": "The scheduling policy in force and its versions."},
        {"name": "flavors", "description": "GPU types (flavors)."},
        {"name": "quotas", "description": "Departments' guaranteed GPUs, borrowing and lending limits."},
        {"name": "wallets", "description": "Credits, holds, the ledger, refill and approval rules."},
        {"name": "prices", "description": "Base prices per GPU type and tier."},
        {"name": "allowances", "description": "Per-user spending limits."},
        {"name": "approvals", "description": "Jobs waiting for a department admin."},
        {"name": "ledger", "description": "Ledger entries: every movement of credits."},
        {"name": "reports", "description": "Usage reports from the ledger."},
        {"name": "departments", "description": "Departments and their members."},
        {"name": "tokens", "description": "Your API tokens."},
        {"name": "me", "description": "Who you are: user, department, role."},
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "portal.api.document_errors"],
    "ENUM_NAME_OVERRIDES": {
        "JobTierEnum": "scheduling.models.Tier",
        "UrgencyEnum": "scheduling.models.Urgency",
        "TaskTypeEnum": "scheduling.models.TaskType",
        "JobStateEnum": "scheduling.models.JobState",
        "ClusterStateEnum": "scheduling.models.ClusterState",
        "ClusterBackendEnum": "scheduling.models.BackendKind",
        "BudgetPeriodEnum": "quotas.models.RefillRule.PERIODS",
        "ReportPeriodEnum": [("day", "day"), ("month", "month")],
        "NotificationKindEnum": "notifications.api.serializers.KIND_CHOICES",
        "TemplateScopeEnum": "scheduling.models.TemplateScope",
        "DataSourceKindEnum": "workloads.models.SourceKind",
        "SecretKindEnum": "workloads.models.SecretKind",
        "SecretPurposeEnum": "workloads.models.SecretPurpose",
        "LedgerKindEnum": "quotas.models.LedgerKind",
        "JobKindEnum": "scheduling.models.JobKind",
    },
}

# ------------------------------------------------------------------------------------------ i18n / static
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"  # collectstatic target (production images)
STATIC_ROOT.mkdir(exist_ok=True)
# No STATICFILES_DIRS: portal/static is the portal app's own folder, which the app finder already serves;
# naming it again made collectstatic find every file twice and warn of each (Chart.js's licence among them).
WHITENOISE_USE_FINDERS = True  # serve straight from the apps in the embedded mode, no collectstatic needed
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# ------------------------------------------------------------------------------------------ security
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
# The portal's cookies are host-only (no Domain attribute), so a browser never sends them to a session's host;
# behind TLS their names carry the __Host- prefix, which a browser accepts only host-only, Secure and on Path=/,
# so no page of another host (a session's under SESSION_DOMAIN included) can set one the portal reads.
SESSION_COOKIE_DOMAIN = None
CSRF_COOKIE_DOMAIN = None
# A request on a session's host reaches the portal only for the route's own /s/<id>/_portal/ paths
# (portal.middleware.SessionHosts), so the domain is allowed as a whole.
ALLOWED_HOSTS.append(f".{SESSION_DOMAIN}")
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if ENV["SECURE_SSL"]:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
    LOGIN_DEVICE_COOKIE_NAME = "__Host-portal_device"
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # A refused request (403, 404: its reason is on the page the user gets) is one log line, not a traceback.
    "filters": {"client_errors_without_traceback": {"()": "portal.middleware.ClientErrorsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["client_errors_without_traceback"]}},
    "root": {"handlers": ["console"], "level": str(ENV["LOG_LEVEL"])},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "kombu.connection": {"level": "ERROR"},
        "axes": {"level": "WARNING"},  # one INFO line per log-in otherwise; failures and lockouts still show  # the filesystem broker has no hostname, by design
    },
}
