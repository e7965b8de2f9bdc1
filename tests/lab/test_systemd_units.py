"""deploy/systemd/: one unit per long-lived process (web, worker, beat, pod watcher, session proxy), each
hardened, restarted on failure and reading the one environment file. ``systemd-analyze verify`` checks them
where systemd is installed; everywhere, a parser reads their keys and every command they run must exist in the
virtual environment and take its arguments."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from portal import config
from tests.lab.test_without_docker import celery_params

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
SERVICES = sorted(UNITS.glob("*.service"))
INSTALLED = "/opt/gpu-portal/"  # where the units expect the checkout and its .venv
VENV_BIN = Path(sys.executable).parent
PROCESSES = {"gpu-portal-web.service", "gpu-portal-worker.service", "gpu-portal-beat.service",
             "gpu-portal-watcher.service", "gpu-portal-session-proxy.service"}


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values]}}: systemd's format (a key may repeat; comments start with # or ;)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}:{n}: not a key=value in a section: {raw!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _exec(path: Path) -> list[str]:
    [line] = parse_unit(path)["Service"]["ExecStart"]
    return shlex.split(line)


def test_every_process_has_its_unit():
    assert {p.name for p in SERVICES} == PROCESSES
    target = parse_unit(UNITS / "gpu-portal.target")
    assert set(target["Unit"]["Wants"][0].split()) == {"gpu-portal-web.service", "gpu-portal-worker.service",
                                                       "gpu-portal-beat.service"}


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_each_unit_is_hardened_restarted_on_failure_and_reads_the_environment_file(path):
    unit = parse_unit(path)
    assert set(unit) == {"Unit", "Service", "Install"}
    service = {k: v[-1] for k, v in unit["Service"].items()}
    assert service["User"] == service["Group"] == "gpu-portal"  # a dedicated user, never root
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"].split() == ["/var/lib/gpu-portal"]  # DATA_DIR, and nothing else
    assert (service["Restart"], service["RestartSec"]) == ("on-failure", "5")
    assert service["EnvironmentFile"] == "/etc/gpu-portal/portal.env"
    assert service["WorkingDirectory"] == INSTALLED.rstrip("/")
    assert unit["Install"]["WantedBy"] == ["gpu-portal.target"]
    assert unit["Unit"]["PartOf"] == ["gpu-portal.target"]


def test_the_environment_file_passes_the_settings_checks_and_keeps_data_dir_writable():
    env = dict(line.split("=", 1) for line in (UNITS / "portal.env").read_text().splitlines()
               if line and not line.startswith("#"))
    values = config.load(env)  # raises with every problem listed
    assert str(values["DATA_DIR"]) == "/var/lib/gpu-portal"
    assert env["GUNICORN_BIND"].startswith("127.0.0.1:")  # loopback: the TLS proxy is in front


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_the_command_each_unit_runs_exists_and_takes_its_arguments(path):
    program, *args = _exec(path)
    assert program.startswith(INSTALLED + ".venv/bin/"), program
    name = program.rsplit("/", 1)[1]
    assert (VENV_BIN / name).exists(), f"{name} is not installed in the virtual environment"
    if name == "gunicorn":
        from gunicorn.config import Config

        opts = Config().parser().parse_args(args)
        assert opts.config == "python:portal.gunicorn_conf" and opts.args == ["portal.wsgi:application"]
    elif name == "celery":
        _parse_celery(args)
    elif args[:1] == ["manage.py"]:
        known = get_commands()
        command, *rest = args[1:]
        assert command in known, f"manage.py {command}: no such command"
        load_command_class(known[command], command).create_parser("manage.py", command).parse_args(rest)
    else:
        assert args[:2] == ["-m", "portal.session_proxy"], args
        from portal.session_proxy import arguments

        arguments().parse_args(args[2:])  # SystemExit on an unknown option


def _parse_celery(args: list[str]) -> None:
    name, params = celery_params(args)
    if name == "beat":  # its schedule in DATA_DIR, the one path the unit may write
        assert params["schedule"].startswith("/var/lib/gpu-portal/")


def test_the_session_proxy_serves_the_environments_port_and_domain(monkeypatch):
    from portal.session_proxy import arguments

    monkeypatch.setenv("SESSION_PORT", "8101")
    monkeypatch.setenv("SESSION_DOMAIN", "gpu-sessions.lab.example")
    args = arguments().parse_args(_exec(UNITS / "gpu-portal-session-proxy.service")[3:])
    assert (args.listen, args.domain, args.portal) == ("127.0.0.1:8101", "gpu-sessions.lab.example",
                                                       "http://127.0.0.1:8000")
    monkeypatch.setenv("SESSION_PORT", "")  # behind a TLS proxy on 443: links carry no port, the proxy keeps 8001
    assert arguments().parse_args([]).listen == "127.0.0.1:8001"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed here")
def test_systemd_analyze_verifies_the_units(tmp_path):
    """systemd's own check, on copies whose paths point at this checkout (it also wants each ExecStart
    executable); any complaint (an unknown key, a bad value, a missing command) fails."""
    for unit in [*SERVICES, UNITS / "gpu-portal.target"]:
        text = unit.read_text().replace(INSTALLED + ".venv/bin/", f"{VENV_BIN}/")
        (tmp_path / unit.name).write_text(text.replace(f"WorkingDirectory={INSTALLED.rstrip('/')}",
                                                       f"WorkingDirectory={ROOT}"))
    names = sorted(p.name for p in tmp_path.iterdir())
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", *names], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "SYSTEMD_LOG_LEVEL": "notice"})
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr
