"""Serializer fields of the job API whose input has a syntax of its own."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.sweeps import CONDITIONS, parse_after
from scheduling.services.dependencies import MAX_DEPENDENCIES


@extend_schema_field({
    "oneOf": [
        {"type": "array", "items": {"type": "object", "properties": {
            "condition": {"type": "string", "enum": list(CONDITIONS)},
            "job": {"type": "integer"}, "array": {"type": "integer"}}}},
        {"type": "string", "example": "afterok:12,afterany:a7"},
    ],
    "description": "jobs or arrays of your department this job waits for: [{\"condition\": \"afterok\", \"job\": 12}, "
                   "{\"condition\": \"afterany\", \"array\": 7}] or Slurm's syntax \"afterok:12,afterany:a7\"",
})
class AfterField(serializers.Field):
    """What a job waits for: a list of ``{"condition", "job" | "array"}`` or Slurm's ``afterok:12:13,afterany:a7``
    (``engine.sweeps.parse_after``). Which jobs exist is the department's, checked at submission."""

    INVALID = 'A list like [{"condition": "afterok", "job": 12}] or "afterok:12".'

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = parse_after(data)
            except ValueError as exc:
                raise serializers.ValidationError(str(exc), code="invalid") from None
        if not isinstance(data, list):
            raise serializers.ValidationError(self.INVALID, code="invalid")
        if len(data) > MAX_DEPENDENCIES:
            raise serializers.ValidationError(f"At most {MAX_DEPENDENCIES} dependencies.", code="too_many")
        out, seen = [], set()
        for i, item in enumerate(data):
            if not isinstance(item, dict) or set(item) - {"condition", "job", "array"}:
                raise serializers.ValidationError(f"Item {i}: give condition and job or array.", code="invalid")
            if item.get("condition") not in CONDITIONS:
                raise serializers.ValidationError(f"Item {i}: condition is one of {', '.join(CONDITIONS)}.",
                                                  code="invalid_condition")
            refs = [k for k in ("job", "array") if k in item]
            value = item.get(refs[0]) if len(refs) == 1 else None
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
                raise serializers.ValidationError(f"Item {i}: name one job or one array by its id.", code="invalid")
            key = (item["condition"], refs[0], value)
            if key not in seen:
                seen.add(key)
                out.append({"condition": item["condition"], refs[0]: value})
        return out

    def to_representation(self, value):
        return value
