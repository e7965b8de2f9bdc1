"""The workloads tests also run the portal on the Kubernetes backend against the fake API server."""

from tests.fakes.k8s_fixtures import kube_fake, sleeps  # noqa: F401 - fixtures
from tests.scheduling.conftest import kube  # noqa: F401 - fixture
