"""The strict serializer base every app's input serializers share, and the shapes of the portal's own
endpoints: who am I, API tokens."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from portal.models import ApiToken, Membership

# More fields than any input serializer declares (a job has about 25): a body with more is refused at once,
# before a single key is validated, and an error lists at most UNKNOWN_FIELDS_LISTED unknown fields.
MAX_BODY_FIELDS = 100
UNKNOWN_FIELDS_LISTED = 20


class FieldsBuiltOnce:
    """A serializer whose fields are built once per class, then copied for each instance.

    DRF builds every serializer instance's fields anew: a plain serializer deep-copies its declared fields (each
    copy runs the field's ``__init__`` again), a model serializer maps every model field again. For a job's
    body and its answer that was about a tenth of a submission's CPU. Here the first instance of a class keeps
    its unbound fields as a prototype and every instance binds shallow copies of them; per-instance state (a
    field's parent and name, set when bound) lives on the copy only. A field that keeps state while it
    validates must create it lazily on itself, never in ``__init__`` (``FlavorField``'s flavors seen).
    Only for serializers whose fields do not depend on the instance's arguments or context."""

    def get_fields(self):
        prototype = type(self).__dict__.get("_fields_prototype")
        if prototype is None:  # built once per class (a subclass has its own)
            prototype = super().get_fields()
            type(self)._fields_prototype = prototype
        return {name: _field_copy(field) for name, field in prototype.items()}


def _field_copy(field):
    """An unbound copy of a prototype field: its attributes shared (its validators' list copied), an item
    field (a list's or dict's ``child``, a many serializer's item) copied and re-parented to the copy."""
    copy = object.__new__(type(field))
    copy.__dict__.update(field.__dict__)
    copy.__dict__.pop("fields", None)  # a nested serializer's bound fields are its own (built on first use)
    if "_validators" in copy.__dict__:
        copy._validators = list(copy._validators)
    child = field.__dict__.get("child")
    if child is not None:
        copy.child = _field_copy(child)
        copy.child.parent = copy
    return copy


# The base of every input serializer: a body that is not a JSON object, or that carries a field the serializer
# does not know, is a 400 with an ``unknown_field`` error for each unknown field (the first
# UNKNOWN_FIELDS_LISTED by name, then how many more), reported together with the other fields' errors
# (``"gpu": 8`` must not submit a one-GPU job). Its docstring is what the OpenAPI schema shows for input
# serializers without one of their own.
class StrictSerializer(serializers.Serializer):
    """Unknown fields are an error (a typo must not be silently ignored)."""

    not_an_object = "Expected a JSON object."

    def unknown_field_message(self, name: str) -> str:
        return "Unknown field."

    def unknown_errors(self, data: dict) -> dict:
        """A field error for each of the first UNKNOWN_FIELDS_LISTED fields of ``data`` the serializer does
        not declare, and one ``non_field_errors`` entry saying how many more there are."""
        unknown = sorted(set(data) - set(self.fields))  # data has at most MAX_BODY_FIELDS keys here
        errors = {name: [serializers.ErrorDetail(self.unknown_field_message(name), code="unknown_field")]
                  for name in unknown[:UNKNOWN_FIELDS_LISTED]}
        if len(unknown) > UNKNOWN_FIELDS_LISTED:
            errors["non_field_errors"] = [serializers.ErrorDetail(
                f"And {len(unknown) - UNKNOWN_FIELDS_LISTED} more unknown fields ({len(unknown)} in all).",
                code="unknown_field")]
        return errors

    def with_choices(self, errors: dict) -> dict:
        """A choice that is not one says which ones there are (DRF's message names only the value)."""
        for name, details in errors.items():
            field = self.fields.get(name)
            if isinstance(field, serializers.ChoiceField) and isinstance(details, list):
                options = ", ".join(str(choice) for choice in field.choices)
                errors[name] = [serializers.ErrorDetail(f"{d} Choose one of: {options}.", code=d.code)
                                if getattr(d, "code", None) == "invalid_choice" else d for d in details]
        return errors

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": [
                serializers.ErrorDetail(self.not_an_object, code="invalid")]})
        if len(data) > MAX_BODY_FIELDS:
            raise serializers.ValidationError({"non_field_errors": [serializers.ErrorDetail(
                f"The body has {len(data)} fields; at most {MAX_BODY_FIELDS} are accepted.",
                code="too_many_fields")]})
        errors: dict = {}
        value = None
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors = self.with_choices(dict(exc.detail))
        for name, details in self.unknown_errors(data).items():
            errors[name] = [*errors.get(name, []), *details]
        if errors:
            raise serializers.ValidationError(errors)
        return value


class StrictSerializerSchema(OpenApiSerializerExtension):
    """The OpenAPI schema of a strict serializer's request body says what the API does with an unknown field:
    ``additionalProperties: false`` (a 400). Its responses are left open."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema


class MembershipSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["department", "role", "user_tier"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    membership = MembershipSerializer(allow_null=True)


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "key_id", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class TokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=80)
    ttl_days = serializers.IntegerField(min_value=1, max_value=365, required=False)


def validated(serializer_class: type[serializers.Serializer], data, **kwargs) -> dict:
    """``data`` read through ``serializer_class``: its validated data, or a 400 with every field's errors (the
    one way an endpoint reads its input)."""
    s = serializer_class(data=data, **kwargs)
    s.is_valid(raise_exception=True)
    return s.validated_data
