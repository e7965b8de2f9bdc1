"""The lab's structure, managed in the product: pages for departments, members, flavors, clusters and quotas,
and the lab file (``manage.py lab apply|export``, docs/lab-as-code.md). It owns no tables: every write goes
through the services of the app that owns the rows (portal, quotas, scheduling)."""
