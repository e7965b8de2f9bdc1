"""Namespace ResourceQuotas: what a quota refusal carries, so the portal can tell when the quota changed."""

from __future__ import annotations

import logging

from scheduling.backends.base import BackendError, QuotaExceeded

from .client import ApiError
from .connection import KubeConnection
from .errors import backend_errors

log = logging.getLogger(__name__)


class NamespaceQuotas(KubeConnection):
    """One list of a namespace's ResourceQuotas, read after a refusal or to compare with one."""

    @backend_errors
    def namespace_quota_version(self, namespace: str) -> str:
        return self._quota_reading(namespace)[0]

    def _quota_reading(self, namespace: str) -> tuple[str, dict[str, dict[str, dict[str, str]]]]:
        """One list of the namespace's ResourceQuotas: (``name@resourceVersion,...`` sorted, {name: hard/used})."""
        items = self.call.json(self.core.list_namespaced_resource_quota, namespace).get("items") or []
        version = ",".join(sorted(f"{q['metadata']['name']}@{q['metadata'].get('resourceVersion', '')}"
                                  for q in items))
        quotas = {q["metadata"]["name"]: {"hard": dict((q.get("status") or {}).get("hard") or {}),
                                          "used": dict((q.get("status") or {}).get("used") or {})} for q in items}
        return version, quotas

    def _quota_exceeded(self, namespace: str, exc: ApiError) -> QuotaExceeded:
        """The refusal, with the namespace's quotas as read right after it (so the portal can tell when they
        change); a failed read leaves the version empty (the refusal then only expires with time)."""
        try:
            version, quotas = self._quota_reading(namespace)
        except (ApiError, BackendError) as err:
            log.warning("could not read the ResourceQuotas of %s: %s", namespace, err)
            version, quotas = "", {}
        return QuotaExceeded(f"{namespace}: {exc.message}", namespace=namespace, quota_version=version,
                             quotas=quotas)
