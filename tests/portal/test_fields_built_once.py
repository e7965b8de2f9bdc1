"""Serializer fields built once per class (``portal.api.serializers.FieldsBuiltOnce``): each instance still gets
fields of its own, bound to it, and a field's state while validating is never shared between requests."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from scheduling.api.serializers import JobDetailSerializer, JobSubmitSerializer

pytestmark = pytest.mark.django_db


def test_model_fields_are_mapped_once_per_class(monkeypatch):
    JobDetailSerializer().fields  # noqa: B018 - the class's prototype exists from here on
    built = []
    original = serializers.ModelSerializer.build_field
    monkeypatch.setattr(serializers.ModelSerializer, "build_field",
                        lambda self, *a, **k: built.append(a[0]) or original(self, *a, **k))
    first, second = JobDetailSerializer(), JobDetailSerializer()
    assert set(first.fields) == set(second.fields) and "queue_position" in first.fields
    assert built == []  # DRF maps every model field again for each instance


def test_each_instance_binds_fields_of_its_own():
    first, second = JobSubmitSerializer(), JobSubmitSerializer()
    for name in ("name", "command", "env", "flavor", "gpus"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second
    # a list's item field belongs to the list it validates for
    assert first.fields["command"].child is not second.fields["command"].child
    assert first.fields["command"].child.parent is first.fields["command"]
    assert first.fields["gpus"].source == "gpus_per_pod" and first.fields["gpus"].field_name == "gpus"
    detail = JobDetailSerializer()
    assert detail.fields["events"].child.parent is detail.fields["events"]


def test_flavors_seen_by_one_submission_are_not_reused_by_the_next(lab, payload):
    first = JobSubmitSerializer(data=payload())
    assert first.is_valid(), first.errors
    lab.a100.name = "a100-renamed"
    lab.a100.save()
    second = JobSubmitSerializer(data=payload())  # names the flavor by its old name
    assert not second.is_valid()
    assert second.errors["flavor"][0].code == "does_not_exist"


def test_errors_are_unchanged(lab, payload):
    s = JobSubmitSerializer(data=payload(gpus=0, command=[""], tier="gold", extra=1))
    assert not s.is_valid()
    assert set(s.errors) >= {"gpus", "command", "tier", "extra"}
    assert "Choose one of" in str(s.errors["tier"][0])
