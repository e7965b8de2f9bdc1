"""Department secrets: declare, rotate and delete them (the department's admins), check a job's use of them
at submission, and resolve them into the ``PodSecrets`` a cluster backend renders.

Values are write-only. They come in here, are encrypted into the row, and leave only in ``resolve`` (for the
backend that writes the portal's own Kubernetes Secret). The audit records names and keys, never values.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal import dispatch
from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from workloads.models import (
    MAX_VALUE_BYTES,
    OWNED_PREFIX,
    DepartmentSecret,
    SecretKind,
    SecretPurpose,
)
from workloads.podsecrets import (
    DOCKER_CONFIG_TYPE,
    NO_SECRETS,
    SECRET_NAME_RE,
    OwnedSecret,
    PodSecrets,
    SecretEnv,
    SecretFiles,
    use_problems,
)

MAX_KEYS = 50
KEY_RE = re.compile(r"[-._a-zA-Z0-9]{1,253}", re.ASCII)  # a Secret's data key (also a file name)
KUBE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
REGISTRY_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?(:[0-9]{1,5})?", re.ASCII)
PASSWORD_KEY = "password"


def _fail(fields: dict[str, list[str]]):
    raise ValidationFailed(fields={k: [{"code": "invalid", "message": m} for m in v] for k, v in fields.items()})


def _key_problems(keys: Iterable) -> list[str]:
    keys = list(keys)
    problems = []
    if len(keys) > MAX_KEYS:
        problems.append(f"At most {MAX_KEYS} keys.")
    for k in keys:
        if not isinstance(k, str) or not KEY_RE.fullmatch(k) or k in (".", ".."):
            problems.append(f"{str(k)[:60]!r} is not a valid key (letters, digits, '-', '_', '.'; at most 253).")
    return problems


def _check(*, name: str, kind: str, purpose: str, reference_name: str, keys: list, values: Mapping | None,
           registry: str, username: str) -> None:
    """Every rule of a declaration, as 400 field errors."""
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not SECRET_NAME_RE.fullmatch(name):
        errors["name"] = ["Lower-case letters, digits and '-', at most 40, starting and ending alphanumeric."]
    if kind not in SecretKind.values:
        errors["kind"] = [f"One of {', '.join(SecretKind.values)}."]
    if purpose not in SecretPurpose.values:
        errors["purpose"] = [f"One of {', '.join(SecretPurpose.values)}."]
    if errors:
        _fail(errors)
    if kind == SecretKind.REFERENCE:
        if not reference_name or not KUBE_NAME_RE.fullmatch(reference_name):
            errors["reference_name"] = ["The name of a Kubernetes Secret in the department's namespace "
                                        "(lower-case letters, digits, '-', '.')."]
        elif reference_name.startswith(OWNED_PREFIX):
            errors["reference_name"] = [f"Names starting with {OWNED_PREFIX!r} are the portal's own Secrets."]
        if values:
            errors["values"] = ["A reference keeps its values in the cluster: give 'keys', not values."]
        if purpose == SecretPurpose.ENV:
            if not keys:
                errors["keys"] = ["The keys the Secret is expected to have are required (jobs name them)."]
            elif problems := _key_problems(keys):
                errors["keys"] = problems
        elif keys:
            errors["keys"] = ["An image pull secret has no keys to name (it is a dockerconfigjson)."]
        if registry or username:
            errors["registry"] = ["A reference's registry credentials are in its Secret."]
    else:
        if reference_name:
            errors["reference_name"] = ["Only a reference names a Kubernetes Secret."]
        if not isinstance(values, Mapping) or not values:
            errors["values"] = ["At least one key: value pair is required."]
        elif any(not isinstance(v, str) for v in values.values()):
            errors["values"] = ["Every value must be a string."]
        elif problems := _key_problems(values):
            errors["values"] = problems
        elif sum(len(k.encode()) + len(v.encode()) for k, v in values.items()) > MAX_VALUE_BYTES:
            errors["values"] = [f"The values are longer than {MAX_VALUE_BYTES} bytes in all."]
        if purpose == SecretPurpose.IMAGE_PULL:
            if isinstance(values, Mapping) and values and set(values) != {PASSWORD_KEY}:
                errors["values"] = [f"An image pull secret's only value is {PASSWORD_KEY!r}."]
            if not registry or not REGISTRY_RE.fullmatch(registry):
                errors["registry"] = ["The registry's host (and port), e.g. registry.example.org:5000, "
                                      "without a scheme."]
            if not username or len(username) > 253 or any(c.isspace() or c == ":" for c in username):
                errors["username"] = ["The registry user name (no spaces or ':')."]
        elif registry or username:
            errors["registry"] = ["Only an image pull secret has a registry and user name."]
    if errors:
        _fail(errors)


def _described(secret: DepartmentSecret) -> dict:
    """What the audit keeps: names and keys, never values."""
    return {"name": secret.name, "kind": secret.kind, "purpose": secret.purpose, "keys": list(secret.keys),
            "reference_name": secret.reference_name, "registry": secret.registry, "username": secret.username,
            "version": secret.version}


def secret_create(*, actor, department, name: str, kind: str, purpose: str = SecretPurpose.ENV,
                  reference_name: str = "", keys: list | None = None, values: Mapping[str, str] | None = None,
                  registry: str = "", username: str = "") -> DepartmentSecret:
    """Declare a secret of ``department`` (the caller checked that ``actor`` administers it)."""
    keys = list(keys or [])
    _check(name=name, kind=kind, purpose=purpose, reference_name=reference_name, keys=keys, values=values,
           registry=registry, username=username)
    secret = DepartmentSecret(department=department, name=name, kind=kind, purpose=purpose,
                              reference_name=reference_name, registry=registry, username=username,
                              created_by=actor if getattr(actor, "pk", None) else None)
    if kind == SecretKind.VALUE:
        secret.values = dict(values or {})
        secret.keys = sorted(values or {})
    else:
        secret.keys = sorted(set(keys))
    try:
        with transaction.atomic():
            secret.save(force_insert=True)
            audit(actor=actor, action="secret.create", obj=secret, department=department, new=_described(secret))
    except IntegrityError:
        raise Conflict(f"The department already has a secret named {name!r}.",
                       fields={"name": [{"code": "exists", "message": "Already taken."}]})
    return secret


def secret_update(*, actor, secret: DepartmentSecret, values: Mapping[str, str] | None = None,
                  keys: list | None = None, reference_name: str | None = None, registry: str | None = None,
                  username: str | None = None) -> DepartmentSecret:
    """Rotate a ``value`` secret (``values`` replaces every value) or change what a reference names. Its kind
    and purpose stay (delete and declare again to change them). Jobs started afterwards get the new values;
    the portal's Secret is rewritten before their pods are created."""
    if all(v is None for v in (values, keys, reference_name, registry, username)):
        return secret  # nothing asked: no new version, no audit entry
    new_values = dict(values) if values is not None else (secret.values if secret.kind == SecretKind.VALUE else None)
    if secret.kind == SecretKind.VALUE and values is None and not new_values:
        new_values = None  # stored values no key decrypts: the caller must give them again
    changed = dict(
        reference_name=secret.reference_name if reference_name is None else reference_name,
        keys=list(secret.keys) if keys is None else list(keys),
        registry=secret.registry if registry is None else registry,
        username=secret.username if username is None else username,
    )
    if secret.kind == SecretKind.VALUE and keys is not None:
        _fail({"keys": ["A value secret's keys are those of its values."]})
    _check(name=secret.name, kind=secret.kind, purpose=secret.purpose, values=new_values, **changed)
    old = _described(secret)
    with transaction.atomic():
        locked = DepartmentSecret.objects.select_for_update().get(pk=secret.pk)
        for k, v in changed.items():
            setattr(locked, k, v)
        if locked.kind == SecretKind.VALUE:
            locked.values = dict(new_values or {})
            locked.keys = sorted(new_values or {})
        else:
            locked.keys = sorted(set(changed["keys"]))
        locked.version += 1
        locked.updated_at = timezone.now()
        locked.save()
        audit(actor=actor, action="secret.update", obj=locked, department=locked.department, old=old,
              new={**_described(locked), "values_changed": values is not None})
    return locked


def secret_delete(*, actor, secret: DepartmentSecret) -> None:
    """Forget a secret. Jobs already submitted that use it fail to start (their pods name a Secret that is no
    longer written). After commit, the portal's own copies are deleted from the department's namespace on
    every cluster (a reference's Secret is the department's, and stays)."""
    with transaction.atomic():
        audit(actor=actor, action="secret.delete", obj=secret, department=secret.department, old=_described(secret))
        if secret.kind == SecretKind.VALUE:
            dispatch.after_commit("scheduling.pods.delete_secret", secret.department.slug, secret.name,
                                  secret.kube_name)
        secret.delete()


# --------------------------------------------------------------------------- jobs
def check_job_uses(*, department_id: int, uses: list[dict], env: Mapping[str, str] | None = None,
                   mounts: Iterable[str] = ()) -> list[str]:
    """What is wrong with a job's ``secrets`` in its department (shape, unknown secrets and keys). A secret of
    another department reads exactly like a missing one: "no such secret"."""
    problems = use_problems(uses, env=env or {}, mounts=mounts)
    if problems or not uses:
        return problems
    names = {u["secret"] for u in uses}
    found = {s.name: s for s in DepartmentSecret.objects.filter(department_id=department_id, name__in=names)}
    for i, use in enumerate(uses):
        secret = found.get(use["secret"])
        if secret is None:
            problems.append(f"Item {i}: no such secret {use['secret']!r} in your department "
                            "(GET /api/v1/secrets lists them).")
        elif secret.purpose != SecretPurpose.ENV:
            problems.append(f"Item {i}: {secret.name!r} is an image pull secret; every job of the department "
                            "uses it already.")
        elif "key" in use and use["key"] not in secret.keys:
            problems.append(f"Item {i}: the secret {secret.name!r} has no key {use['key']!r} "
                            f"(its keys: {', '.join(secret.keys) or 'none'}).")
    return problems


def resolve(*, department_id: int, uses: list[dict], department_rows: list[DepartmentSecret] | None = None
            ) -> PodSecrets:
    """A job's secrets as the backends need them, in one query: its uses, and every image pull secret of its
    department. A use whose secret was deleted since the job was submitted still names the Secret (the pod
    then waits with "secret not found", and the job fails with that reason) rather than silently dropping it.
    ``department_rows``: every secret of the department, read already (no query here): a pod worker reads
    them once for all the jobs of a message.
    """
    uses = uses or []
    names = {u.get("secret") for u in uses}
    if department_rows is None:
        rows = list(DepartmentSecret.objects.filter(
            Q(name__in=names) | Q(purpose=SecretPurpose.IMAGE_PULL), department_id=department_id).order_by("name"))
    else:  # the same rows, picked from all of the department's
        rows = sorted((s for s in department_rows if s.name in names or s.purpose == SecretPurpose.IMAGE_PULL),
                      key=lambda s: s.name)
    if not rows and not uses:
        return NO_SECRETS
    by_name = {s.name: s for s in rows if s.purpose == SecretPurpose.ENV}

    def kube_name(name: str) -> str:
        secret = by_name.get(name)
        return secret.kube_name if secret is not None else f"{OWNED_PREFIX}{name}"

    env = tuple(SecretEnv(name=u["env"], secret=kube_name(u["secret"]), key=u["key"]) for u in uses if "env" in u)
    files = tuple(SecretFiles(secret=kube_name(u["secret"]), path=u["path"]) for u in uses if "path" in u)
    pulls = [s for s in rows if s.purpose == SecretPurpose.IMAGE_PULL]
    used = {u.get("secret") for u in uses}
    owned = tuple(_owned(s) for s in rows if s.kind == SecretKind.VALUE and s.values
                  and (s.purpose == SecretPurpose.IMAGE_PULL or s.name in used))
    return PodSecrets(env=env, files=files, image_pull=tuple(s.kube_name for s in pulls), owned=owned)


def _owned(secret: DepartmentSecret) -> OwnedSecret:
    values = secret.values
    if secret.purpose == SecretPurpose.IMAGE_PULL:
        auth = base64.b64encode(f"{secret.username}:{values.get(PASSWORD_KEY, '')}".encode()).decode()
        config = {"auths": {secret.registry: {"username": secret.username, "password": values.get(PASSWORD_KEY, ""),
                                              "auth": auth}}}
        return OwnedSecret(name=secret.kube_name, type=DOCKER_CONFIG_TYPE,
                           data=((".dockerconfigjson", json.dumps(config, sort_keys=True)),), version=secret.version)
    return OwnedSecret(name=secret.kube_name, data=tuple(sorted(values.items())), version=secret.version)
