"""The Kubernetes backend's own errors, and how the API server's refusals map to the interface's errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from scheduling.backends.base import BackendError

from .client import ApiError

# The Eviction API's answer (500) for a pod selected by more than one PodDisruptionBudget (eviction.go).
MULTIPLE_PDBS = "more than one PodDisruptionBudget"
# The ResourceQuota admission plugin's 403 (it runs before the AlreadyExists check of storage).
EXCEEDED_QUOTA = "exceeded quota"


def is_quota_refusal(err: ApiError) -> bool:
    return err.status == 403 and EXCEEDED_QUOTA in err.message


class GangIncomplete(BackendError):
    """Not every pod of a gang exists (yet): nothing was ungated. Retry after ``ensure_pods``."""


class PodNameTaken(BackendError):
    """A pod with the portal's deterministic name exists but is not the portal's (or not this attempt's)."""


class PriorityClassNotOwned(BackendError):
    """A PriorityClass the portal should manage exists, differs, and is not labelled as the portal's."""



F = TypeVar("F", bound=Callable[..., Any])


def backend_errors(fn: F) -> F:
    """Public methods never leak ``ApiError``: unhandled 4xx become ``BackendError`` subclasses."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            raise exc.to_backend_error() from exc

    return wrapper  # type: ignore[return-value]


def is_patch_test_failure(err: ApiError) -> bool:
    return err.status == 422 and "test" in err.message.lower()
