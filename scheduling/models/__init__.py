"""Scheduling's tables: jobs and their lifecycle (``jobs``), the clusters they run on (``clusters``), what
happened to them (``records``: attempt logs, the charts' samples, policy versions, the preemption audit
trail), decisions about them (``decisions``: approvals, namespace quota refusals), job templates
(``templates``), sessions' images and grants (``sessions``), sweeps (``sweeps``: job arrays and dependencies)
and the policy tuner's settings and proposals (``tuning``).
Everything is importable from here, as one module."""

from scheduling.models.calendar import *  # noqa: F403
from scheduling.models.clusters import *  # noqa: F403
from scheduling.models.decisions import *  # noqa: F403
from scheduling.models.jobs import *  # noqa: F403
from scheduling.models.records import *  # noqa: F403
from scheduling.models.sessions import *  # noqa: F403
from scheduling.models.sweeps import *  # noqa: F403
from scheduling.models.templates import *  # noqa: F403
from scheduling.models.tuning import *  # noqa: F403
