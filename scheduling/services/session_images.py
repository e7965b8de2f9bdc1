"""The lab's session images (JupyterLab, a VS Code server, ...): declared by platform admins, in the lab file
or through the API, and offered to every researcher who starts a session (docs/sessions.md)."""

from __future__ import annotations

from django.db import transaction

from portal.audit import audit
from portal.errors import NotFound
from portal.tenancy import ADMIN, require_role
from scheduling.models import SessionImage

FIELDS = ("label", "image", "port", "readiness_path", "command", "description")


def session_image_set(*, actor, name: str, image: str, port: int, readiness_path: str = "/",
                      command: list[str] | None = None, label: str = "", description: str = "") -> SessionImage:
    """Create or change the session image ``name`` (validated input); audited. Platform admins only (``actor``
    None: the lab file applied by a platform operator)."""
    if actor is not None:
        require_role(actor, ADMIN)
    values = {"label": label, "image": image, "port": port, "readiness_path": readiness_path or "/",
              "command": list(command or []), "description": description}
    with transaction.atomic():
        found = SessionImage.objects.select_for_update().filter(name=name).first()
        old = {f: getattr(found, f) for f in FIELDS} if found else None
        if found is None:
            found = SessionImage.objects.create(name=name, **values)
        else:
            for field, value in values.items():
                setattr(found, field, value)
            found.save()
        if old != values:
            audit(actor=actor, action="session_image.set", obj=found, old=old, new=values)
    return found


def session_image_delete(*, actor, name: str) -> None:
    """Remove a session image from the lab's list (sessions started from it keep running); audited."""
    if actor is not None:
        require_role(actor, ADMIN)
    with transaction.atomic():
        found = SessionImage.objects.select_for_update().filter(name=name).first()
        if found is None:
            raise NotFound("No such session image.")
        audit(actor=actor, action="session_image.delete", obj=found, old={"image": found.image})
        found.delete()
