"""Peak GPU memory from TensorBoard event files (observability/services/tensorboard.py), written by the
``tensorboard`` package's own writer; a bad, an empty and a too-large file are skipped and named."""

from __future__ import annotations

import os
import time

import pytest

from observability.services import tensorboard as tb

pytest.importorskip("tensorboard")


def _write(directory, values: dict[str, list[float]]) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(directory))
    for tag, series in values.items():
        for step, v in enumerate(series):
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)])
            w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    w.close()


def test_the_peak_of_max_memory_allocated_in_bytes(tmp_path):
    gib = 1024 ** 3
    _write(tmp_path, {"memory/max_memory_allocated": [2 * gib, 9 * gib, 7 * gib], "loss": [1e12]})
    peak = tb.peak_memory(tmp_path)
    assert (peak.peak_memory_mib, peak.tag, peak.files, peak.skipped) == (9 * 1024, "memory/max_memory_allocated",
                                                                          1, [])
    assert peak.source == "tensorboard"


def test_units_from_the_tag_and_files_in_subdirectories(tmp_path):
    _write(tmp_path / "run-1", {"gpu/peak_memory_gib": [10.5]})
    _write(tmp_path / "run-2", {"gpu/peak_memory_mib": [4096]})
    assert tb.peak_memory(tmp_path).peak_memory_mib == 10.5 * 1024


def test_no_peak_tag_is_no_peak(tmp_path):
    _write(tmp_path, {"loss": [0.5]})
    peak = tb.peak_memory(tmp_path)
    assert peak.peak_memory_mib is None and peak.files == 1


def test_bad_empty_and_huge_files_are_skipped_and_named(tmp_path, monkeypatch):
    _write(tmp_path, {"max_memory_allocated": [1024 ** 3]})
    (tmp_path / "events.out.tfevents.1.bad").write_bytes(os.urandom(500))
    (tmp_path / "events.out.tfevents.2.empty").write_bytes(b"")
    huge = tmp_path / "events.out.tfevents.3.huge"
    huge.write_bytes(b"\0" * 2048)
    monkeypatch.setattr(tb, "MAX_FILE_BYTES", 1024)
    peak = tb.peak_memory(tmp_path)
    assert peak.peak_memory_mib == 1024 and peak.files == 1
    why = {line.split(":")[0]: line for line in peak.skipped}
    assert "not an event file" in why["events.out.tfevents.1.bad"]
    assert why["events.out.tfevents.2.empty"].endswith("empty")
    assert "more than 1024" in why["events.out.tfevents.3.huge"]


def test_a_missing_directory_says_so(tmp_path):
    peak = tb.peak_memory(tmp_path / "nope")
    assert peak.peak_memory_mib is None and "not a directory" in peak.skipped[0]
