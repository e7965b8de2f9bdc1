"""The budgets interface: everything scheduling may ask of quotas, and nothing else.

Scheduling's services import this module, never ``quotas.services`` (an import-linter contract in
pyproject.toml checks it), and quotas never imports scheduling's services or tasks. The calls:

* ``read_for_cycle() -> BudgetView``: the snapshot's one read of every wallet and price. ``view.hold_for(job)``
  is what a queued job needs available to be admitted; ``view.available_credits()`` what each metered
  department can still commit (None: budgets unused).
* ``lock_department_wallets(department_ids)``: lock the wallets a transaction may move money in, before any
  job row (the portal's one lock order: wallets, then jobs, each in primary-key order).
* ``on_job_admitted(job=...)`` (admit): place the hold, inside the admitting transaction.
* ``on_job_resized(job=..., ...)`` (a resize applied): the attempt's GPUs change size in the ledger, a grow
  held at the clearing price, inside the transaction that applies it.
* ``on_attempt_ended(job=..., attempt=..., outcome=...)`` (attempt ended): settle, release, refund, inside the
  transaction that ends the attempt. Idempotent.
* ``submission_check_inputs(...)`` / ``needs_approval(job=..., inputs=...)``: whether a submission waits for
  a department admin (its department's approval rule, its owner's allowance).
* ``estimated_cost(job=...)`` (quote): the worst-case cost of one attempt; ``price_for(flavor_id=..., tier=...)``
  the base price it starts from, and ``cost_of(rate=..., gpu_seconds=...)`` the one cost function (a quote
  prices the engine's clearing price with it); ``read_prices()`` every base price at once (the approvals
  inbox quotes a page of jobs with it).
* ``preemption_terms(...)`` (submission): whether a job may be preemptible or not apart from its tier under the
  lab's limits, and the surcharge a non-preemptible one pays (a field error when the limits refuse it).
* ``job_cost(job=...)`` (a job's cost endpoint): its hold, cost to date and final charge, from the ledger.
* ``burn_rate(wallet=...)`` / ``spend_by_department(since=...)`` (the home page): a department's spend per
  day and running rate; every department's net spend since a date, in one query.

The hooks return a ``BudgetNote`` (or None): what happened to the money, which the caller records on the
job's timeline. Budgets never write a job or its events.
"""

from __future__ import annotations

from quotas.services.hooks import (
    BudgetNote,
    BudgetView,
    on_attempt_ended,
    on_job_admitted,
    on_job_resized,
    read_for_cycle,
)
from quotas.services.preemption_limits import PreemptionTerms, preemption_terms
from quotas.services.pricing import cost_of, estimated_cost, price_for, read_prices
from quotas.services.reports import burn_rate, job_cost, spend_by_department
from quotas.services.submission_checks import SubmissionCheckInputs, needs_approval, submission_check_inputs
from quotas.services.wallets import lock_department_wallets

__all__ = [
    "BudgetNote",
    "BudgetView",
    "PreemptionTerms",
    "SubmissionCheckInputs",
    "burn_rate",
    "cost_of",
    "estimated_cost",
    "job_cost",
    "lock_department_wallets",
    "needs_approval",
    "preemption_terms",
    "on_attempt_ended",
    "on_job_admitted",
    "on_job_resized",
    "price_for",
    "read_for_cycle",
    "read_prices",
    "spend_by_department",
    "submission_check_inputs",
]
