"""The tier PriorityClasses: created and kept equal to the portal's tier table, never touching a class the
portal does not own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduling.backends.base import MANAGED_BY

from .client import ApiError
from .connection import KubeConnection
from .errors import PriorityClassNotOwned, backend_errors
from .podspec import LABEL_MANAGED_BY, is_ours

SYSTEM_PRIORITY_PREFIX = "system-"


class PriorityClasses(KubeConnection):
    """``ensure_priority_classes``."""

    @backend_errors
    def ensure_priority_classes(
        self,
        classes: Mapping[str, int],
        *,
        preemption_policy: str | Mapping[str, str] = "Never",
        descriptions: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Create or update the tier PriorityClasses; returns what changed (``"created ai-realtime"``, ...).

        ``preemptionPolicy`` defaults to ``Never``: the portal decides preemption itself (Eviction API, PDBs,
        cooldown), so kube-scheduler must not preempt on its own. ``value`` and ``preemptionPolicy`` are
        immutable in Kubernetes: for the portal's own classes a change means delete + create (running pods keep
        their priority); a class the portal does not own (no ``app.kubernetes.io/managed-by=gpu-portal``) is
        never touched: if it differs, :class:`PriorityClassNotOwned` is raised before anything changes.
        """
        descriptions = descriptions or {}
        existing_items, _ = self.call.list_all(self.scheduling.list_priority_class, page_size=self.page_size)
        existing = {pc["metadata"]["name"]: pc for pc in existing_items}
        plan: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        refused: list[str] = []
        for name, value in sorted(classes.items()):
            policy = preemption_policy if isinstance(preemption_policy, str) else preemption_policy.get(name, "Never")
            desired = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
                "value": int(value),
                "preemptionPolicy": policy,
                "globalDefault": False,
                "description": descriptions.get(name, f"gpu-portal tier class {name}"),
            }
            current = existing.get(name)
            if name.startswith(SYSTEM_PRIORITY_PREFIX):
                refused.append(f"{name}: system classes are reserved")
            elif current is None:
                plan.append(("create", desired, None))
            elif not is_ours(current):
                if (current.get("value"), current.get("preemptionPolicy", "PreemptLowerPriority")) != (value, policy):
                    refused.append(
                        f"{name}: exists with value {current.get('value')} / "
                        f"{current.get('preemptionPolicy', 'PreemptLowerPriority')} and is not managed by {MANAGED_BY}"
                    )
            elif (current.get("value"), current.get("preemptionPolicy", "PreemptLowerPriority")) != (value, policy):
                plan.append(("recreate", desired, current))
            elif current.get("globalDefault") or (
                name in descriptions and current.get("description") != desired["description"]
            ):  # descriptions are only enforced when given: an administrator's wording is kept otherwise
                if name not in descriptions:
                    desired["description"] = current.get("description", "")
                plan.append(("update", desired, current))
        if refused:
            raise PriorityClassNotOwned("refusing to change PriorityClasses: " + "; ".join(refused))
        changes = []
        for action, desired, current in plan:
            name = desired["metadata"]["name"]
            if action == "create":
                self._create_priority_class(desired)
                changes.append(f"created {name} ({desired['value']})")
            elif action == "update":
                body = json.loads(json.dumps(desired))
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]  # type: ignore[index]
                self.call.json(self.scheduling.replace_priority_class, name, body)
                changes.append(f"updated {name}")
            else:
                self.call.json(self.scheduling.delete_priority_class, name)
                self._create_priority_class(desired)
                changes.append(f"recreated {name} ({current['value']} -> {desired['value']})")  # type: ignore[index]
        return changes

    def _create_priority_class(self, desired: dict[str, Any]) -> None:
        try:
            self.call.json(self.scheduling.create_priority_class, desired)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Created concurrently (another worker starting): fine if it is ours and equal.
            current = self.call.json(self.scheduling.read_priority_class, desired["metadata"]["name"])
            if not is_ours(current) or current.get("value") != desired["value"]:
                raise PriorityClassNotOwned(f"{desired['metadata']['name']} was created concurrently by someone else")
