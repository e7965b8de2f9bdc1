"""Read-side queries of workloads, shared by its API and the lab's pages: what a user may see, through the
tenancy gate, with the relations every listing shows."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.tenancy import VIEW
from workloads.models import DataSource, DepartmentSecret


def secrets_for(user) -> QuerySet[DepartmentSecret]:
    """The department secrets ``user`` may see (names, keys, whether values are set; never a value)."""
    return DepartmentSecret.objects.restrict(user, VIEW).select_related("department", "created_by")


def data_sources_for(user) -> QuerySet[DataSource]:
    """The data sources ``user`` may see (their department's and those shared with it), by name then cluster."""
    return (DataSource.objects.restrict(user, VIEW).select_related("cluster", "department")
            .prefetch_related("shared_with").order_by("name", "cluster__name"))
