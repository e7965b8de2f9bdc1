"""docs/without-docker.md, read as a script: its environment files pass the settings' checks and migrate and
``manage.py check`` on them; every ``manage.py``, celery, gunicorn and session-proxy command it gives exists and
takes its arguments. A command or setting that stops working fails here instead of on an operator's host.
Nothing is timed: the subprocesses have generous bounds for a busy machine."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from portal import config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "without-docker.md"
MANAGE = ".venv/bin/python manage.py "


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def _env_files() -> dict[str, dict[str, str]]:
    """{file name: its variables} of every ``cat > NAME <<'EOF'`` in the page's shell blocks."""
    files = {}
    for block in _blocks("sh"):
        for name, body in re.findall(r"cat > (\S+) <<'EOF'\n(.*?)\nEOF\n", block, flags=re.S):
            files[name] = dict(line.split("=", 1) for line in body.splitlines() if line and not line.startswith("#"))
    return files


def _commands(prefix: str) -> list[list[str]]:
    """The arguments after ``prefix`` of every line that starts with it: in the shell blocks, and the
    ``ExecStart`` of the systemd unit (whose paths are the installed checkout's)."""
    lines = [line.strip() for block in _blocks("sh") for line in block.splitlines()]
    lines += [line.split("=", 1)[1].replace("/opt/gpu-portal/", "") for block in _blocks("ini")
              for line in block.splitlines() if line.startswith("ExecStart=")]
    return [shlex.split(line[len(prefix):]) for line in lines if line.startswith(prefix)]


def test_the_page_documents_both_set_ups():
    files = _env_files()
    assert set(files) == {"portal.env", "portal-embedded.env"}
    postgres, embedded = files["portal.env"], files["portal-embedded.env"]
    assert postgres["DATABASE_URL"].startswith("postgres://") and postgres["CELERY_BROKER_URL"].startswith("redis://")
    assert "DATABASE_URL" not in embedded and "CELERY_BROKER_URL" not in embedded
    assert (embedded["SCHEDULING_BACKEND"], bool(embedded["KUBECONFIG"])) == ("kubernetes", True)


@pytest.mark.parametrize("name", ["portal.env", "portal-embedded.env"])
def test_each_environment_file_passes_the_settings_checks(name):
    values = config.load(_env_files()[name])  # raises with every problem listed
    assert values["SCHEDULING_BACKEND"] in ("simulated", "kubernetes")


def test_every_manage_py_command_exists_and_takes_its_arguments():
    commands = _commands(MANAGE)
    assert {c[0] for c in commands} >= {"migrate", "collectstatic", "check", "lab", "watch_pods", "changepassword"}
    known = get_commands()
    for name, *args in commands:
        assert name in known, f"manage.py {name}: no such command"
        parser = load_command_class(known[name], name).create_parser("manage.py", name)
        parser.parse_args(args)  # SystemExit on an unknown option or a bad value


def celery_params(args: list[str]) -> tuple[str, dict]:
    """(sub-command, its parsed options) of a ``celery -A portal ...`` command line; raises if it is bad."""
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery as cli

    from portal.celery import app

    ctx = cli.make_context("celery", list(args))
    assert ctx.params["app"] == "portal"
    ctx.obj = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        name, *rest = [*ctx.protected_args, *ctx.args]
    return name, cli.get_command(ctx, name).make_context(name, rest, parent=ctx).params


def test_the_worker_and_beat_commands_parse_and_consume_every_queue():
    from django.conf import settings

    commands = _commands(".venv/bin/celery ")
    assert {c[2] for c in commands} == {"worker", "beat"}
    for args in commands:
        name, params = celery_params(args)
        if name == "worker":  # a queue the portal routes to but no documented worker reads would never run
            routed = {r["queue"] for r in settings.CELERY_TASK_ROUTES.values()} | {"default"}
            assert set(params["queues"]) >= routed


def test_the_web_and_session_proxy_commands_parse():
    from gunicorn.config import Config

    [web] = {tuple(c) for c in _commands(".venv/bin/gunicorn ")}
    opts = Config().parser().parse_args(list(web))
    assert opts.config == "python:portal.gunicorn_conf" and opts.args == ["portal.wsgi:application"]
    # the modules it names exist (not imported: the config sets PROMETHEUS_MULTIPROC_DIR for its process)
    assert importlib.util.find_spec("portal.gunicorn_conf") and importlib.util.find_spec("portal.wsgi")

    [proxy] = _commands(".venv/bin/python -m portal.session_proxy ")
    assert proxy[0::2] == ["--listen", "--portal", "--domain"]


def _run(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)  # a bound for a busy machine, not a timing
    assert out.returncode == 0, f"manage.py {' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def _clean_env(documented: dict, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (
        "DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER", "SCHEDULING_BACKEND",
        "KUBECONFIG", "SECRET_KEY", "ALLOWED_HOSTS", "PORTAL_URL")}
    return {**env, **documented, "DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings"}


@pytest.mark.postgres
def test_set_up_a_migrates_collects_and_checks_on_postgresql(tmp_path):
    """The PostgreSQL set-up on a fresh database of this server (the page's own user, password and host are
    an operator's): migrate, collectstatic and check as documented."""
    import psycopg
    from django.db import connection

    documented = _env_files()["portal.env"]
    db = f"portal_nodocker_{uuid.uuid4().hex[:8]}"
    params = {k: v for k, v in connection.get_connection_params().items() if k in ("host", "port", "user", "password")}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
    try:
        user = params.get("user") or "postgres"
        auth = f"{user}:{params['password']}" if params.get("password") else user
        url = f"postgres://{auth}@{params.get('host') or '127.0.0.1'}:{params.get('port') or 5432}/{db}"
        redis = os.environ.get("REDIS_URL") or documented["REDIS_URL"]
        env = _clean_env({**documented, "DATABASE_URL": url, "CELERY_BROKER_URL": redis, "REDIS_URL": redis},
                         tmp_path)
        _run(env, "migrate", "--noinput")
        _run(env, "collectstatic", "--noinput")
        assert "no issues" in _run(env, "check")
        with psycopg.connect(dbname=db, **params) as conn:  # migrated there, not in some SQLite file
            assert conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 50
        assert not (tmp_path / "portal.sqlite3").exists()
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def test_set_up_b_migrates_and_checks_on_the_embedded_defaults_with_a_kubernetes_cluster(tmp_path):
    """SQLite and the filesystem broker in DATA_DIR, the default cluster on Kubernetes: nothing here reaches
    the cluster, so the page's kubeconfig path need not exist."""
    env = _clean_env(_env_files()["portal-embedded.env"], tmp_path)
    _run(env, "migrate", "--noinput")
    assert "no issues" in _run(env, "check")
    assert (tmp_path / "portal.sqlite3").exists()
    effective = {line.split()[0]: line.split()[1] for line in _run(env, "config").splitlines()
                 if len(line.split()) > 1 and line.split()[0].isupper()}
    assert effective["SCHEDULING_BACKEND"] == "kubernetes"
    assert effective["KUBECONFIG"] == "/etc/gpu-portal/lab.kubeconfig"


def test_gunicorn_binds_loopback_unless_told_and_the_image_binds_every_interface(monkeypatch, tmp_path):
    # Before a TLS proxy exists the web process must not listen on every interface; the image (a pod's own
    # network) says 0.0.0.0 itself.
    import runpy
    from pathlib import Path

    monkeypatch.delenv("GUNICORN_BIND", raising=False)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    conf = runpy.run_path(str(Path(__file__).resolve().parents[2] / "portal" / "gunicorn_conf.py"))
    assert conf["bind"] == "127.0.0.1:8000"
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    assert "GUNICORN_BIND=0.0.0.0:8000" in dockerfile
