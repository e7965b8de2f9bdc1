"""The kinds of event the portal tells people about: the one list, what each says, and who wants it by default.

A kind is data, not code: adding one (a job idle on its GPUs, say) is one ``Kind(...)`` below and one
``notifications.services.emit(kind=..., ...)`` where it happens. Preferences, the page, the API, e-mails and
webhooks all read this list. ``subject`` and ``body`` are ``str.format`` templates over the event's data; a key
the data lacks shows as ``?`` instead of failing a delivery.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    title: str  # the preferences page's label
    audience: str  # who receives it, for the page and the docs
    subject: str
    body: str
    email: bool  # on by default for e-mail
    webhook: bool  # on by default for the user's own webhook
    link: str = "/jobs/{job_id}/"  # the page it points to, below PORTAL_URL
    department_webhook: bool = False  # a department's webhook receives it by default
    # An account's own mail (an invitation to set a password): e-mailed to its user whatever the preferences,
    # never to a webhook, not among the preferences, and without an unsubscribe link. Its link may name
    # ``{uidb64}`` and ``{token}``: a set-password token made when the e-mail is sent, never stored.
    essential: bool = False


_JOB = "Job {job_id} ({job_name})"

KINDS: tuple[Kind, ...] = (
    # Noisy: one per job and attempt, so off unless a user asks.
    Kind("job.admitted", "Job admitted", "the job's owner", _JOB + " admitted",
         "Job {job_id} ({job_name}) was admitted: {message}", email=False, webhook=False),
    Kind("job.started", "Job started", "the job's owner", _JOB + " is running",
         "Job {job_id} ({job_name}) is running: {message}", email=False, webhook=False),
    Kind("job.succeeded", "Job succeeded", "the job's owner", _JOB + " succeeded",
         "Job {job_id} ({job_name}) succeeded: {message}", email=False, webhook=True),
    # Important: something went wrong or someone waits.
    Kind("job.failed", "Job failed", "the job's owner", _JOB + " failed: {reason}",
         "Job {job_id} ({job_name}) failed: {message}\n\nHint: {hint}", email=True, webhook=True),
    Kind("job.retried", "Job retried", "the job's owner", _JOB + " is retried as attempt {attempt}",
         "Job {job_id} ({job_name}) failed ({cause}: {message}) and is retried as attempt {attempt} in "
         "{backoff_s} s.", email=False, webhook=True),
    Kind("job.dependency_never_satisfied", "Job's dependency can never be met", "the job's owner",
         _JOB + " will not run: its dependency can never be met",
         "Job {job_id} ({job_name}) was ended without running: {message}", email=True, webhook=True),
    Kind("job.preempted", "Job preempted", "the job's owner", _JOB + " was preempted",
         "Job {job_id} ({job_name}) was preempted ({reason}): {message}\n\n{requeue_note}", email=True,
         webhook=True),
    Kind("approval.requested", "Approval requested",
         "the department's admins (not the job's owner), else the platform admins",
         "Job {job_id} by {owner} waits for your approval",
         "{owner} submitted job {job_id} ({job_name}). {reason}\n\nApprove or reject it on the approvals page.",
         email=True, webhook=True, link="/budgets/approvals/", department_webhook=True),
    Kind("approval.decided", "Approval decided", "the job's owner", _JOB + " was {decision}",
         "{actor} {decision} job {job_id} ({job_name}). {comment}", email=True, webhook=True),
    # The calendar (scheduling.services.calendar): a maintenance window ahead of a running job, a booking begun.
    Kind("maintenance.affects_job", "Maintenance affects a running job", "the job's owner",
         "Job {job_id} ({job_name}) runs on nodes going into maintenance at {start}",
         "Job {job_id} ({job_name}) runs on {cluster} nodes that go into maintenance ({reason}) from {start} to {end}. "
         "Its time limit would take it past the start: it is stopped when the nodes are drained then and queued "
         "again; save a checkpoint before.", email=True, webhook=True),
    Kind("booking.started", "Booking begun", "a booking's owners (its department's admins for a department's)",
         "Your booking of {gpus} {flavor} GPUs ({purpose}) has begun",
         "The {gpus} {flavor} GPUs on {cluster} booked for {purpose} are yours until {end}: your jobs start on "
         "them first, outside the department's quota, when their time limit ends by then.",
         email=True, webhook=False, link="/calendar/"),
    Kind("budget.low", "Budget low", "the department's admins",
         "Budget of {department} is low: {balance_credits} left",
         "The balance of {department} fell to {balance_credits}, below the alert threshold of {threshold_credits}. "
         "Jobs wait once it cannot cover their holds.", email=True, webhook=True,
         link="/budgets/{department}/", department_webhook=True),
    Kind("job.deadline_at_risk", "Deadline at risk", "the job's owner", _JOB + " will miss its deadline",
         "Job {job_id} ({job_name}) is not expected to finish by its deadline ({deadline}): about {late_min} min "
         "late. {message}\n\nA higher urgency, a smaller request or a later deadline may help; or cancel it.",
         email=True, webhook=True),
    Kind("job.idle", "Job idle on its GPUs", "the job's owner", _JOB + " holds idle GPUs",
         "Job {job_id} ({job_name}) holds {gpus} GPU(s) that stayed under {threshold_pct}% for {idle_minutes} "
         "minutes. Release them if the work is done, so others can use them.", email=True, webhook=True),
    Kind("session.ending", "Session about to end", "the session's owner", _JOB + " ends in {minutes} minutes",
         "Session {job_id} ({job_name}) reaches its lifetime in {minutes} minutes and will be stopped then. Save "
         "your work, or start a new session to go on.", email=True, webhook=True),
    Kind("session.stopped_idle", "Idle session stopped", "the session's owner", _JOB + " was stopped as idle",
         "Session {job_id} ({job_name}) was stopped: its GPUs stayed idle and no browser was connected for "
         "{minutes} minutes. Start a new one when you need it again.", email=True, webhook=True),
    Kind("allowance.exhausted", "Allowance exhausted", "the user and the department's admins",
         "{user}'s {period} allowance is exhausted",
         "{user} has committed {used_credits} of a {limit_credits} {period} allowance; job {job_name} ({cost_credits}) "
         "waits for a department admin's approval, and so will the next ones this period.",
         email=True, webhook=True, link="/budgets/approvals/", department_webhook=True),
)

# Essential kinds: not in KINDS, which lists what users and department webhooks choose among.
ESSENTIAL: tuple[Kind, ...] = (
    Kind("account.invited", "Invitation to the portal", "a member added without single sign-on",
         "You are invited to the GPU portal ({department})",
         "{actor} added you to {department_name} ({department}) as {role}. Your user name is {username}.\n\n"
         "Choose your password with the link below; it works once, within {valid_days} day(s). If it has expired, "
         "ask a department admin to send the invitation again.",
         email=True, webhook=False, link="/accounts/set-password/{uidb64}/{token}/", essential=True),
)

BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS + ESSENTIAL}
NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
