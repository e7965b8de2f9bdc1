"""The lab file's sections are read through the API's input serializers: one declaration per field, so a value
the API refuses is refused by the file with the same message at its line, and a value the API reads (a quoted
number) is read the same way."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from lab import demo
from lab.inputs import MemberCreateSerializer
from lab.services.labfile import LabFileInvalid, apply_lab
from quotas.api.budgets import ApprovalRuleSerializer, PriceInputSerializer, RefillRuleSerializer
from quotas.api.views import FlavorInputSerializer, QuotaCreateSerializer
from quotas.models import Quota
from scheduling.api.clusters import NodeGroupInputSerializer
from scheduling.models import Node
from workloads.api.serializers import SecretCreateSerializer

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()


def _api_message(serializer: type, name: str, value) -> str:
    with pytest.raises(serializers.ValidationError) as exc:
        serializer().fields[name].run_validation(value)
    return str(exc.value.detail[0])


@pytest.mark.parametrize(("old", "new", "path", "serializer", "name", "value"), [
    ("gpu_memory_gib: 80", "gpu_memory_gib: 20000", "flavors.0.gpu_memory_gib", FlavorInputSerializer,
     "gpu_memory_gib", 20000),
    ("gpus_per_node: 4", "gpus_per_node: 65", "clusters.0.node_groups.0.gpus_per_node", NodeGroupInputSerializer,
     "gpus_per_node", 65),
    ("email: alice@lab.example", "email: alice-at-lab", "departments.0.members.0.email", MemberCreateSerializer,
     "email", "alice-at-lab"),
    ("{nominal: 4, borrowing_limit: 4", "{nominal: 200000, borrowing_limit: 4", "departments.0.quotas.a100-80gb.nominal",
     QuotaCreateSerializer, "nominal", 200000),
    ("amount: 25000", "amount: -1", "departments.0.budget.refill.amount", RefillRuleSerializer, "amount", -1),
    ("{gpus_above: 4}", "{gpus_above: -3}", "departments.0.approval_rule.gpus_above", ApprovalRuleSerializer,
     "gpus_above", -3),
    ("{realtime: 3000,", "{realtime: -5,", "prices.a100-80gb.realtime", PriceInputSerializer, "per_gpu_hour", -5),
])
def test_a_value_the_api_refuses_is_refused_with_its_message_at_its_line(old, new, path, serializer, name, value):
    assert DEMO.count(old) == 1
    text = DEMO.replace(old, new)
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if new in t)
    found = {(e.line, ".".join(map(str, e.path)), e.message) for e in exc.value.errors}
    assert found == {(line, path, _api_message(serializer, name, value))}, found


def test_values_are_read_as_the_api_reads_them():
    text = DEMO.replace("a100-80gb: {nominal: 3, borrowing_limit: 2", 'a100-80gb: {nominal: "2", borrowing_limit: 2')
    text = text.replace("gpus_per_node: 4", 'gpus_per_node: "5"')
    apply_lab(text)
    assert Quota.objects.get(department__slug="nlp").nominal == 2
    assert sorted(Node.objects.values_list("gpus", flat=True)) == [5, 5]
    assert apply_lab(text).unchanged


@pytest.mark.parametrize(("old", "new", "path"), [
    ("tier: standard}", "tier: standard, comment: hi}", "departments.0.members.1.comment"),
    ("gpus_per_node: 4", "gpus_per_node: 4\n        comment: hi", "clusters.0.node_groups.0.comment"),
    ("{gpus_above: 4}", "{gpus_above: 4, department: vision}", "departments.0.approval_rule.department"),
])
def test_what_only_the_api_takes_is_an_unknown_field_of_the_file(old, new, path):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(DEMO.replace(old, new, 1))
    [err] = exc.value.errors
    assert ".".join(map(str, err.path)) == path and err.message.startswith("unknown field (known: ")


def test_a_secret_is_read_through_the_secrets_api_serializer():
    keys = [f"k{i}" for i in range(51)]  # more than the API takes
    text = DEMO + ("secrets:\n  - department: vision\n    name: hf\n    kind: reference\n"
                   f"    reference_name: hf-token\n    keys: [{', '.join(keys)}]\n")
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    with pytest.raises(serializers.ValidationError) as api:
        SecretCreateSerializer().fields["keys"].run_validation(keys)
    assert [(e.path, e.message, e.line) for e in exc.value.errors] == [
        (("secrets", 0, "keys"), str(api.value.detail[0]), len(text.splitlines()))]
