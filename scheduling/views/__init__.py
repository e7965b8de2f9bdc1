"""Scheduling's pages (the dashboard): jobs, the cluster, the policy, what-if. URLs in scheduling/urls.py."""
