"""Configuration is read and checked in one place and fails fast with every problem listed."""

from __future__ import annotations

import re

import pytest

from portal import config


def test_defaults_are_embedded():
    values = config.load({})
    assert values["DATABASE_URL"] == "" and values["SCHEDULING_BACKEND"] == "simulated"
    assert values["DEBUG"] is False


def test_every_problem_is_reported_at_once():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"DEBUG": "maybe", "SCHEDULING_BACKEND": "slurm", "KUBE_BURST": "many",
                     "DATABASE_URL": "mysql://x", "SECRET_KEY": "short"})
    text = str(exc.value)
    for name in ("DEBUG", "SCHEDULING_BACKEND", "KUBE_BURST"):
        assert name in text
    assert len(exc.value.problems) == 3  # type errors first; cross-checks run once types are valid


def test_cross_checks():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"DATABASE_URL": "mysql://x/y", "SECRET_KEY": "short", "CYCLE_INTERVAL_S": "0",
                     "KUBE_NAMESPACE_TEMPLATE": "jobs", "WHATIF_MAX_JOBS": "0"})
    assert len(exc.value.problems) == 5
    assert any("WHATIF_MAX_JOBS" in p for p in exc.value.problems)


def test_admissions_need_at_least_one_at_a_time_and_one_connection():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"ADMIT_CONCURRENCY": "0", "KUBE_CONNECTIONS": "-1"})
    assert exc.value.problems == ["ADMIT_CONCURRENCY and KUBE_CONNECTIONS must be positive."]


@pytest.mark.parametrize(("name", "value", "shown"), [
    # URLs: the password (and any credential in the query) masked, the server and database kept
    ("DATABASE_URL", "postgres://portal:pw@db.lab:5432/portal", "postgres://portal:***@db.lab:5432/portal"),
    ("DATABASE_URL", "postgres://portal@db.lab/portal", "postgres://portal@db.lab/portal"),
    ("DATABASE_URL", "postgres://db.lab/portal?sslmode=require&password=pw",
     "postgres://db.lab/portal?sslmode=require&password=***"),
    ("CELERY_BROKER_URL", "redis://:s3cret@redis.lab:6379/0", "redis://:***@redis.lab:6379/0"),
    ("REDIS_URL", "rediss://default:s3cret@redis.lab:6380/1", "rediss://default:***@redis.lab:6380/1"),
    ("PROMETHEUS_URL", "http://reader:pw@prom.lab:9090", "http://reader:***@prom.lab:9090"),
    ("PROMETHEUS_URL", "http://prom.lab:9090/?token=abc", "http://prom.lab:9090/?token=***"),
    ("SESSION_AUTH_URL", "https://portal:pw@portal.lab/api/v1/session-auth",
     "https://portal:***@portal.lab/api/v1/session-auth"),
    ("OIDC_OP_TOKEN_ENDPOINT", "https://idp.lab/token?client_secret=abc", "https://idp.lab/token?client_secret=***"),
    # keys, passwords and client secrets: masked whole, whatever they hold
    ("SECRET_KEY", "k" * 40 + "://not-a-url", "***"),
    ("FIELD_ENCRYPTION_KEYS", "key-one,key-two", "***"),
    ("EMAIL_HOST_PASSWORD", "smtp-pw", "***"),
    ("OIDC_RP_CLIENT_SECRET", "client-secret", "***"),
])
def test_every_secret_bearing_setting_is_masked_and_only_its_secret(name, value, shown):
    # (the value put straight into the loaded set: OIDC's cross-checks want the whole set, and describe() is
    # what the command prints)
    rows = {n: v for n, v, _ in config.describe({**config.load({}), name: value})}
    assert rows[name] == shown
    for secret in ("pw", "s3cret", "abc", "key-one", "smtp-pw", "client-secret"):
        if secret in value:
            assert secret not in rows[name].replace("password", "")


def test_every_setting_named_for_a_credential_is_flagged_secret():
    credential = re.compile(r"(SECRET|PASSWORD|_KEY|_KEYS)$")
    names = {s.name for s in config.SETTINGS if credential.search(s.name) and not s.secret}
    assert names == {"SESSION_TLS_SECRET"}  # the name of a Kubernetes Secret, not its content


def test_manage_py_config_prints_no_secret(monkeypatch, capsys):
    from django.core.management import call_command

    monkeypatch.setenv("DATABASE_URL", "postgres://portal:db-pw-123@db.lab:5432/portal")
    monkeypatch.setenv("EMAIL_HOST_PASSWORD", "smtp-pw-456")
    monkeypatch.setenv("OIDC_RP_CLIENT_SECRET", "oidc-789")
    call_command("config")
    out = capsys.readouterr().out
    assert "postgres://portal:***@db.lab:5432/portal" in out
    assert not any(secret in out for secret in ("db-pw-123", "smtp-pw-456", "oidc-789"))


def test_manage_py_fails_fast_with_a_clear_message(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "SCHEDULING_BACKEND": "nomad", "DATA_DIR": str(tmp_path)},
                       timeout=60)
    assert r.returncode != 0
    assert "Invalid portal configuration" in r.stderr and "SCHEDULING_BACKEND" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("env", "says"), [
    ({"SESSION_DOMAIN": "127.0.0.1"}, "DNS name"),
    ({"SESSION_DOMAIN": "Sessions.Lab"}, "lower-case"),
    ({"SESSION_DOMAIN": "*.sessions.lab.example"}, "DNS name"),
    ({"SESSION_PORT": "http"}, "SESSION_PORT"),
    ({"SESSION_DOMAIN": "lab.example", "PORTAL_URL": "https://gpu.lab.example"}, "must not hold the portal's host"),
    ({"SESSION_DOMAIN": "sessions.lab.example", "PORTAL_URL": "http://lab.example"}, "plant cookies"),
])
def test_the_sessions_domain_is_an_origin_apart_from_the_portals(env, says):
    with pytest.raises(config.ConfigError, match=says):
        config.load(env)


def test_a_sessions_domain_below_the_portals_host_is_fine_behind_tls():
    config.load({"SESSION_DOMAIN": "sessions.lab.example", "PORTAL_URL": "https://lab.example", "SECURE_SSL": "true",
                 "SECRET_KEY": "k" * 60})


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.25", "quarter", "nan", "inf"])
def test_a_session_default_fraction_outside_0_1_is_refused_at_start_up(value):
    with pytest.raises(config.ConfigError) as exc:
        config.load({"SESSION_DEFAULT_GPU_FRACTION": value})
    assert exc.value.problems == [f"SESSION_DEFAULT_GPU_FRACTION={value!r} must be a share of one GPU above 0 and "
                                  "below 1 (e.g. 0.25), or empty (off)."]


@pytest.mark.parametrize(("value", "share"), [("", None), ("0.25", 0.25), (" 0.5 ", 0.5)])
def test_a_session_default_fraction_is_read_as_a_share(value, share):
    values = config.load({"SESSION_DEFAULT_GPU_FRACTION": value})
    assert config.session_fraction(str(values["SESSION_DEFAULT_GPU_FRACTION"])) == share


@pytest.mark.parametrize("value", ["default/scratch", "scratch=/mnt/scratch", "default/scratch=mnt/scratch",
                                   "a/b/c=/mnt/x"])
def test_a_checkpoint_read_mount_that_names_no_source_or_no_absolute_directory_is_refused(value):
    with pytest.raises(config.ConfigError) as exc:
        config.load({"CHECKPOINT_READ_MOUNTS": f"default/ok=/mnt/ok,{value}"})
    assert exc.value.problems == [f"CHECKPOINT_READ_MOUNTS: {value!r} is not <cluster>/<source>=<absolute "
                                  "directory>."]
