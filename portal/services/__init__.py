"""The portal's own use cases: the lab's departments and their members (see docs/lab-as-code.md).

Every write is validated, runs in one transaction and writes an ``AuditEntry`` (who, what, before/after,
why) in that transaction. Archiving a department cancels its waiting jobs through scheduling's own cancel
(the one way a job changes state), which is why these services sit above ``scheduling.services``.
"""
