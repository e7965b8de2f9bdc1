"""``manage.py demo``'s second port and its banner: the session proxy's port is named in the help and the
start-up banner, chosen with ``--session-port``, refused when it is taken (two demos on one host), and the
banner says what the seeded lab holds."""

from __future__ import annotations

import socket

import pytest
from django.core.management import CommandError, call_command

from lab import demo
from lab.management.commands.demo import Command, background_processes, banner, describe_lab, use_session_port

pytestmark = pytest.mark.django_db


def test_the_help_names_the_second_port_and_its_option():
    text = " ".join(Command().create_parser("manage.py", "demo").format_help().split())
    assert "The demo takes a second port: the session proxy" in text
    assert "(default 8001; --session-port)" in text
    assert "--session-port PORT" in text and "A second demo on one host needs its own ADDRPORT, --session-port" in text


def test_the_banner_names_the_portal_and_the_session_proxys_port(settings):
    settings.SESSION_PORT, settings.SESSION_DOMAIN = "8001", "sessions.localhost"
    text = banner("127.0.0.1:8000")
    assert "Open http://127.0.0.1:8000/ (API docs at http://127.0.0.1:8000/api/docs/)." in text
    assert ("The session proxy listens on 127.0.0.1:8001: notebooks and endpoints at "
            "http://s<job id>.sessions.localhost:8001/s/<job id>/, each on its own host (--session-port chooses another port)."
            in text)
    assert "No session proxy" in banner("127.0.0.1:8000", proxy=False)


def test_another_session_port_moves_the_proxy_the_routes_and_the_childrens_setting(settings, monkeypatch):
    monkeypatch.setenv("SESSION_PORT", "8001")
    use_session_port(8175)
    assert settings.SESSION_PORT == "8175"
    assert "127.0.0.1:8175: notebooks and endpoints at http://s<job id>.sessions.localhost:8175/" in banner("x:1")
    [proxy] = [c for c in background_processes("127.0.0.1:8170", workload=None) if c.name == "session-proxy"]
    assert proxy.argv[proxy.argv.index("--listen") + 1] == "127.0.0.1:8175"
    assert all(c.env["SESSION_PORT"] == "8175" for c in background_processes(workload=None))


def test_a_taken_session_port_is_refused_before_anything_starts(settings, monkeypatch, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    monkeypatch.setenv("SESSION_PORT", settings.SESSION_PORT)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=rf"port 127.0.0.1:{port} is taken .*choose another with "
                                               "--session-port"):
            call_command("demo", "127.0.0.1:8171", session_port=port)
    assert not (tmp_path / "demo-credentials.json").exists()  # nothing seeded, nothing started


@pytest.mark.parametrize("port", [0, 70000])
def test_a_session_port_out_of_range_is_refused(port):
    with pytest.raises(CommandError, match="--session-port must be a port number"):
        call_command("demo", session_port=port)


def test_the_banner_describes_the_seeded_lab_as_it_is(settings, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    demo.seed(jobs=False)
    assert describe_lab() == ("4 departments (vision, nlp, robotics, platform), 2 simulated clusters "
                              "(cloud: 4 x h100; default: 8 x a100-80gb, 2 x a100-shared, 2 CPU nodes)")
