"""The embedded default's broker: kombu's filesystem transport, with every file published atomically.

kombu's own writer opens ``<name>.msg`` and only then locks and fills it, while its reader takes any
``*.msg`` it lists without locking: under CPU load the worker read an empty or half-written message, raised
``JSONDecodeError`` and died ("Unrecoverable error"; celery/kombu#1551). Here a message is written under a
name the reader ignores, flushed, and renamed into place (``os.replace`` in the same folder is atomic on
POSIX and Windows), so a reader sees a whole message or none. The reader claims a message by renaming it
into the processed folder, on the same file system (atomic: two consumers cannot both take it), and a file
that still cannot be decoded (left by an older writer, a full disk) is set aside in ``broken/`` and logged,
never allowed to stop the worker: the reconciler repairs whatever that message would have done.

The exchange tables (fanout bindings) are rewritten the same way, under one lock file for writers.

Settings register it as what ``filesystem://`` means in every process of the portal (``register()``) when
CELERY_BROKER_URL is empty or ``filesystem://``; production uses Redis and never loads this transport.
"""

from __future__ import annotations

import logging
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.transport.virtual import Empty
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

# A name whose part after the first dot is not "<queue>.msg": kombu's listing (ours too) never takes it.
PARTIAL_SUFFIX = ".partial"


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that nobody can see the file until it holds all of it."""
    path = os.fspath(path)
    tmp = f"{path}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)  # no fsync: a file a power cut left empty is set aside by the reader (below)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        filename = os.path.join(self.data_folder_out, f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg")
        try:
            write_atomically(filename, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {filename!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed_dir = Path(self.processed_folder)
        claimed_dir.mkdir(parents=True, exist_ok=True)
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue
            claimed = claimed_dir / filename
            try:
                os.rename(os.path.join(self.data_folder_in, filename), claimed)
            except OSError:
                continue  # another consumer took it first
            try:
                payload = claimed.read_bytes()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            try:
                message = loads(bytes_to_str(payload))
            except ValueError:
                self._set_aside(claimed)
                continue
            if not self.store_processed:
                claimed.unlink(missing_ok=True)
            return message
        raise Empty()

    def _set_aside(self, claimed: Path) -> None:
        broken = claimed.parent.parent / "broken"
        broken.mkdir(exist_ok=True)
        os.replace(claimed, broken / claimed.name)
        log.error("broker message %s could not be decoded; moved to %s (the reconciler repairs what it would "
                  "have done)", claimed.name, broken)

    @contextmanager
    def _tables_locked(self):
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(self.control_folder / ".tables.lock", "a") as f:
            filesystem.lock(f, filesystem.LOCK_EX)
            try:
                yield
            finally:
                filesystem.unlock(f)

    def get_table(self, exchange):
        file = self._exchange_file(exchange)
        try:
            return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(file.read_bytes()))]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._tables_locked():
            queues = self.get_table(exchange)
            if entry not in queues:
                queues.insert(0, entry)
                self._write_table(exchange, queues)

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # the virtual channel's own bookkeeping, not the filesystem one (which rewrites the table in place)
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._tables_locked():
            queues = self.get_table(exchange)
            if entry in queues:
                queues.remove(entry)
                self._write_table(exchange, queues)

    def _write_table(self, exchange, queues) -> None:
        file = self._exchange_file(exchange)
        try:
            write_atomically(file, str_to_bytes(dumps(queues)))
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc


class Transport(filesystem.Transport):
    Channel = Channel
    # One process-wide state, as kombu's filesystem transport keeps (bindings are per process).
    global_state = filesystem.virtual.BrokerState()


def register() -> None:
    """Make ``filesystem://`` URLs use this transport in this process (web, worker and beat alike)."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
