"""Thin Celery tasks of observability: take nothing or ids, call a service."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from observability.services.collect import collect


@shared_task(name="observability.collect", ignore_result=True)
def collect_task() -> dict:
    """Read the GPU use of running and just-ended attempts, flag idle jobs, learn from finished ones."""
    return asdict(collect())
