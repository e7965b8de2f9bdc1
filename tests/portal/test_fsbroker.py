"""The embedded default's broker (portal/fsbroker.py): a reader never sees a message its writer has not
finished, and a file that cannot be decoded is set aside instead of stopping the worker."""

from __future__ import annotations

import pytest
from django.conf import settings
from kombu import Connection
from kombu.transport import filesystem, resolve_transport

from portal import fsbroker


def _embedded_transport():
    """The transport Celery uses when CELERY_BROKER_URL is empty, as the settings choose it."""
    assert settings.CELERY_BROKER_URL == "filesystem://", "the tests run on the embedded default broker"
    return resolve_transport("filesystem")


@pytest.fixture
def folders(tmp_path):
    for sub in ("out", "processed", "control"):
        (tmp_path / sub).mkdir()
    return {"data_folder_in": str(tmp_path / "out"), "data_folder_out": str(tmp_path / "out"),
            "processed_folder": str(tmp_path / "processed"), "control_folder": str(tmp_path / "control")}


def _channel(transport, folders):
    conn = Connection("filesystem://", transport=transport, transport_options=folders)
    channel = conn.channel()
    channel.queue_declare("q")
    return conn, channel


def test_a_reader_never_takes_a_message_its_writer_is_still_writing(folders, monkeypatch):
    """The crash of the embedded default: the worker listed a message file between its writer's open() and
    write(), read it empty and died of JSONDecodeError. Here the reader polls exactly in that window."""
    transport = _embedded_transport()
    wconn, writer = _channel(transport, folders)
    rconn, reader = _channel(transport, folders)
    seen_while_writing = []

    def dumps_then_poll(payload):  # the writer serialises; a busy machine runs the reader right then
        encoded = real_dumps(payload)
        try:
            seen_while_writing.append(reader._get("q"))
        except filesystem.Empty:
            seen_while_writing.append(None)
        return encoded

    real_dumps = filesystem.dumps
    monkeypatch.setattr(filesystem, "dumps", dumps_then_poll)
    monkeypatch.setattr(fsbroker, "dumps", dumps_then_poll)
    writer._put("q", {"body": "whole"})
    assert seen_while_writing == [None]  # nothing visible yet (kombu's own transport raised JSONDecodeError)
    assert reader._get("q") == {"body": "whole"}
    with pytest.raises(filesystem.Empty):
        reader._get("q")
    wconn.release()
    rconn.release()


def test_an_undecodable_message_is_set_aside_and_the_next_one_delivered(folders, tmp_path, caplog):
    conn, channel = _channel(fsbroker.Transport, folders)
    # left by an older writer or a full disk; "0_" sorts before any name the writer makes (monotonic ms)
    (tmp_path / "out" / "0_torn.q.msg").write_bytes(b'{"body": ')
    channel._put("q", {"body": "next"})
    assert channel._get("q") == {"body": "next"}
    assert [p.name for p in (tmp_path / "broken").iterdir()] == ["0_torn.q.msg"]
    assert "could not be decoded" in caplog.text
    assert not list((tmp_path / "processed").iterdir())  # delivered messages are not kept
    conn.release()


def test_exchange_tables_are_rewritten_whole(folders):
    conn, channel = _channel(fsbroker.Transport, folders)
    channel._queue_bind("fan", "", "", "a")
    channel._queue_bind("fan", "", "", "b")
    channel._queue_bind("fan", "", "", "a")  # bound once only
    assert [q.queue for q in channel.get_table("fan")] == ["b", "a"]
    channel._delete("a", "fan", "", "")
    assert [q.queue for q in channel.get_table("fan")] == ["b"]
    channel._put_fanout("fan", {"body": "all"}, "")
    assert channel._get("b") == {"body": "all"}
    conn.release()
