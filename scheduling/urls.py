"""The dashboard pages of scheduling (mounted at /, namespace ``dashboard``)."""

from django.urls import path, re_path

from scheduling.views import (
    calendar,
    fair_share,
    home,
    jobs,
    policy,
    queue,
    sessions,
    sweeps,
    templates,
    whatif,
)

app_name = "dashboard"

urlpatterns = [
    path("", home.home, name="home"),
    path("jobs/", jobs.jobs, name="jobs"),
    path("jobs/live", jobs.jobs_live, name="jobs-live"),
    path("jobs/new", jobs.submit, name="submit"),
    path("jobs/new/quote", jobs.submit_quote, name="submit-quote"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("queue/", queue.queue, name="queue"),
    path("fair-share/", fair_share.fair_share, name="fair-share"),
    path("calendar/", calendar.calendar, name="calendar-page"),
    path("jobs/<int:pk>/cancel", jobs.cancel, name="cancel"),
    path("jobs/<int:pk>/connect", sessions.connect, name="connect"),
    path("s/<int:pk>/_portal/connect", sessions.exchange, name="session-exchange"),
    path("sessions/<int:pk>/auth", sessions.forward_auth, name="session-auth"),
    path("jobs/<int:pk>/hold", sweeps.hold_or_release, {"verb": "hold"}, name="hold"),
    path("jobs/<int:pk>/release", sweeps.hold_or_release, {"verb": "release"}, name="release"),
    path("arrays/<int:pk>/", sweeps.array_detail, name="array"),
    re_path(r"^arrays/(?P<pk>[0-9]+)/(?P<verb>cancel|cancel-waiting|hold|release)$", sweeps.array_action,
            name="array-action"),
    path("jobs/<int:pk>/logs/", jobs.job_logs, name="job-logs"),
    path("jobs/<int:pk>/logs/text", jobs.job_log_text, name="job-log-text"),
    path("templates/", templates.templates, name="templates"),
    path("templates/<int:pk>/edit", templates.template_edit, name="template-edit"),
    path("templates/<int:pk>/delete", templates.template_delete_view, name="template-delete"),
    path("cluster/", policy.cluster, name="cluster"),
    path("policy/", policy.policy, name="policy"),
    path("policy/tuner/run", policy.tuner_run, name="tuner-run"),
    path("policy/tuner/config", policy.tuner_config, name="tuner-config"),
    re_path(r"^policy/proposals/(?P<pk>[0-9]+)/(?P<verb>apply|dismiss)$", policy.proposal_decide,
            name="proposal-decide"),
    path("whatif/", whatif.whatif, name="whatif"),
]
