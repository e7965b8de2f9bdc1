"""The pure checks of a job's secrets list and the token shapes (no database)."""

from __future__ import annotations

import pytest

from workloads.podsecrets import token_kind, use_problems


def test_a_secret_directory_may_not_overlap_another_mount():
    uses = [{"secret": "hf", "path": "/data/hf"}]
    assert any("overlaps the mount '/data'" in p for p in use_problems(uses, mounts=["/data"]))
    assert any("overlaps" in p for p in use_problems([{"secret": "hf", "path": "/data"}], mounts=["/data/x"]))
    assert use_problems(uses, mounts=["/database"]) == []  # a prefix of the name is not a parent directory


@pytest.mark.parametrize(("name", "value", "looks"), [
    ("X", "hf_" + "a" * 20, True), ("X", "glpat-" + "b" * 20, True), ("X", "0" * 40, True),
    ("DB_PASSWORD", "correct horse", True), ("X", "hf_short", False), ("EPOCHS", "90", False),
    ("X", "z" * 40, False),  # long but not random (and not hex)
    ("X", "gs://bucket/some/long/path/to/a/dataset/shard-0001", False),
])
def test_token_shapes(name, value, looks):
    assert (token_kind(name, value) is not None) is looks
