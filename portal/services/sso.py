"""Single sign-on group mappings (which identity-provider group becomes which membership at first login),
as the lab file declares them; audited like every change of the lab."""

from __future__ import annotations

from django.db import transaction

from portal.audit import audit
from portal.errors import ValidationFailed
from portal.models import Department, Role, SsoGroupMapping, UserTier


def _values(m: SsoGroupMapping) -> dict:
    return {"group": m.group, "department": m.department.slug, "role": m.role, "tier": m.user_tier}


def sso_mapping_set(*, actor, group: str, department: Department, role: str = Role.RESEARCHER,
                    user_tier: str = UserTier.STANDARD) -> SsoGroupMapping:
    errors = {}
    if not group.strip():
        errors["group"] = [{"code": "required", "message": "Name the identity provider's group."}]
    if role not in Role.values:
        errors["role"] = [{"code": "invalid_choice", "message": f"Choose one of {', '.join(Role.values)}."}]
    if user_tier not in UserTier.values:
        errors["tier"] = [{"code": "invalid_choice", "message": f"Choose one of {', '.join(UserTier.values)}."}]
    if errors:
        raise ValidationFailed(fields=errors)
    with transaction.atomic():
        m = SsoGroupMapping.objects.select_for_update().filter(group=group, department=department).first()
        old = _values(m) if m else None
        if m is None:
            m = SsoGroupMapping(group=group, department=department)
        m.role, m.user_tier = role, user_tier
        m.save()
        if old != _values(m):
            audit(actor=actor, action="sso_mapping.set", obj=m, department=department, old=old, new=_values(m))
    return m


def sso_mapping_delete(*, mapping: SsoGroupMapping, actor) -> None:
    with transaction.atomic():
        audit(actor=actor, action="sso_mapping.delete", obj=mapping, department=mapping.department,
              old=_values(mapping))
        mapping.delete()
