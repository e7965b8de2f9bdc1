"""What every part of the Kubernetes backend shares: its configuration, its API clients, the rate-limited
caller, and the one read of an attempt's pods."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from scheduling.backends.base import PodState

from .client import KubeCaller, TokenBucket, build_api_client
from .errors import backend_errors
from .podspec import (
    ADMISSION_GATE,
    DEFAULT_INSTALLATION,
    DEFAULT_TOLERATIONS,
    LABEL_POD_INDEX,
    attempt_selector,
    installation_selector,
    is_ours,
)
from .routes import RouteConfig
from .secrets import SecretsSeen
from .status import pod_state

INSTALLATION = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class FlavorRule:
    """``resource`` on nodes carrying all ``labels`` is the portal flavor ``flavor``.

    Example: ``FlavorRule("a100-80gb", "nvidia.com/gpu", (("gpu-type", "a100"),))`` and
    ``FlavorRule("a100-mig-3g.40gb", "nvidia.com/mig-3g.40gb", (("gpu-type", "a100"),))``.
    """

    flavor: str
    resource: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, resource: str, node_labels: Mapping[str, str]) -> bool:
        return resource == self.resource and all(node_labels.get(k) == v for k, v in self.labels)


class KubeConnection:
    """The backend's state (its HTTP client and settings); the other parts of the backend extend it."""

    def __init__(
        self,
        *,
        name: str = "default",
        api_client: k8s.ApiClient | None = None,
        host: str | None = None,
        kubeconfig: str | None = None,
        kubeconfig_dict: dict[str, Any] | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
        flavors: Sequence[FlavorRule] = (),
        qps: float = 50.0,
        burst: int = 100,
        connections: int = 32,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 3.0,
        watch_timeout_s: int = 300,
        conflict_retries: int = 5,
        page_size: int = 500,
        tolerations: Sequence[Mapping[str, Any]] = DEFAULT_TOLERATIONS,
        run_as_user: int | None = 1000,
        gate: str = ADMISSION_GATE,
        routes: RouteConfig | None = None,
        installation: str = DEFAULT_INSTALLATION,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not INSTALLATION.fullmatch(installation or ""):
            raise ValueError(f"installation {installation!r} is not a label value (1-63 letters, digits, '-', '_', "
                             "'.', beginning and ending with a letter or digit)")
        self.name = name
        # Only objects carrying this installation's label are its own: another installation's (or anyone's
        # look-alike) pods on the same cluster are never read as its jobs', nor touched.
        self.installation = installation
        self.selector = installation_selector(installation)
        self.secrets_seen = SecretsSeen()
        self.api_client = build_api_client(
            api_client=api_client, host=host, kubeconfig=kubeconfig, kubeconfig_dict=kubeconfig_dict,
            context=context, in_cluster=in_cluster, connections=connections,
        )
        self.core = k8s.CoreV1Api(self.api_client)
        self.policy = k8s.PolicyV1Api(self.api_client)
        self.scheduling = k8s.SchedulingV1Api(self.api_client)
        self.networking = k8s.NetworkingV1Api(self.api_client)
        self.routes = routes or RouteConfig()
        self.flavors = tuple(flavors)
        self.watch_timeout_s = int(watch_timeout_s)
        self.conflict_retries = int(conflict_retries)
        self.page_size = int(page_size)
        self.tolerations = tuple(tolerations)
        self.run_as_user = run_as_user
        self.gate = gate
        self.sleep = sleep
        self.call = KubeCaller(TokenBucket(qps, burst, sleep=sleep), connect_timeout_s=connect_timeout_s,
                               timeout_s=timeout_s)

    def close(self) -> None:
        self.api_client.close()

    def pod_state(self, pod: Mapping[str, Any]) -> PodState | None:
        """A pod as this backend reads it: None unless it is this installation's."""
        return pod_state(pod, gate=self.gate, installation=self.installation)

    def owns(self, obj: Mapping[str, Any], *, job_id: int | None = None, attempt: int | None = None) -> bool:
        """The object was written by this installation (for that job attempt, when given)."""
        return is_ours(obj, installation=self.installation, job_id=job_id, attempt=attempt)

    def _attempt_pods(self, namespace: str, job_id: int, attempt: int) -> dict[int, dict[str, Any]]:
        """The attempt's pods by index, from one label-selected list."""
        data = self.call.json(self.core.list_namespaced_pod, namespace,
                              label_selector=attempt_selector(job_id, attempt, self.installation))
        pods: dict[int, dict[str, Any]] = {}
        for pod in data.get("items") or []:
            try:
                pods[int(pod["metadata"]["labels"][LABEL_POD_INDEX])] = pod
            except (KeyError, ValueError):
                continue
        return pods

    @backend_errors
    def attempt_pods(self, *, job_id: int, attempt: int, namespace: str) -> tuple[PodState, ...]:
        """One attempt's pods as ``PodState``s, from one label-selected list."""
        pods = self._attempt_pods(namespace, job_id, attempt)
        return tuple(s for s in (self.pod_state(pods[i]) for i in sorted(pods)) if s is not None)

