"""Quota and budget use cases, one small module per concern (see docs/budgets.md and docs/architecture.md).

* ``wallets``: the ledger's writers (holds, settlements, releases, refunds, refills, adjustments) and the
  wallet row locks.
* ``pricing``: base prices, the one cost function ``cost_of`` and the quotes built on it.
* ``submission_checks``: whether a submission waits for a department admin (its approval rule, its owner's
  allowance). Deciding on a waiting job is scheduling's (``scheduling.services.job_approvals``); deciding on
  a quota change request is ``quota_requests``.
* ``allowances``: per-user limits inside a department's wallet.
* ``rules``: what admins configure (quotas, refill rules, approval rules), audited.
* ``settlement``: what an ended attempt is charged and refunded.
* ``hooks``: what the job lifecycle calls (the cycle's read of wallets and prices, the admission hold, the end
  of an attempt). Scheduling reaches these only through ``quotas.budgets``.
* ``reports``: usage, statements, burn rate, a job's cost.
* ``periodic``: refills, the ledger drift check, the repair of unsettled holds.

Money rules shared by every module:

* Credits are integer milli-credits (mcr). Never floats.
* Every movement is one ``LedgerEntry`` written in the same transaction that changes the wallet, with the
  wallet row locked, so concurrent movements serialise per wallet and can never overspend.
* Budgets are enforced for a department once it has a wallet. An install without any wallet does not use
  budgets at all.

Nothing here imports scheduling: quotas sits below scheduling. The facts it needs of jobs, nodes and clusters
(a user's queued jobs, installed GPUs, where an attempt stands) come through ``quotas.ports``, which scheduling
implements, or as arguments (a preemption that was the portal's own: ``preempted_by_portal``).
"""
