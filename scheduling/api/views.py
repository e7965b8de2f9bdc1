"""Jobs API v1. Views validate and call services; every job read goes through Job.objects.restrict."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import Prefetch
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from portal.api import idempotency_key
from portal.api.serializers import validated
from portal.errors import LogsUnavailable, NotFound, ValidationFailed
from portal.tenancy import CHANGE, VIEW, member
from portal.timestamps import parse_log_stamp
from scheduling.api.serializers import (
    CancelSerializer,
    DependenciesSerializer,
    JobBatchSerializer,
    JobBatchSubmitSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    QuoteSerializer,
)
from scheduling.backends.base import BackendError
from scheduling.models import JobEvent
from scheduling.selectors import job_events, jobs_for
from scheduling.services.dependencies import job_set_dependencies
from scheduling.services.jobs import job_cancel, job_submit, job_submit_batch
from scheduling.services.logs import attempt_log_lines, role_pods
from scheduling.services.quote import job_quote
from scheduling.services.sessions import connect_start, reachable, route_url, service_key_issue
from scheduling.services.sweeps import job_hold, job_release
from scheduling.services.templates import merged_spec, spec_of_job, template_for_submission, with_data_workers
from workloads.podsecrets import token_warnings

log = logging.getLogger(__name__)

MAX_ID = 2**63 - 1  # the largest id a row can have (a bigger one would overflow the database's integer)

FILTERS = [
    OpenApiParameter("state", str, description="Comma-separated states, e.g. queued,running"),
    OpenApiParameter("tier", str, description="Comma-separated tiers"),
    OpenApiParameter("flavor", str),
    OpenApiParameter("mine", bool, description="Only my jobs"),
    OpenApiParameter("department", str, description="Department slug (platform admins)"),
    OpenApiParameter("q", str, description="Name contains"),
    OpenApiParameter("array", int, description="Only the tasks of this array (in index order)"),
]


class SubmitThrottle(SimpleRateThrottle):
    """The per-user ``submit`` rate (``DEFAULT_THROTTLE_RATES["submit"]``), counted in jobs.

    A single submission costs one; a batch costs the number of jobs in its body (at most JOBS_BATCH_MAX),
    counted before validation as a single submission is. Both share one bucket, so batching saves HTTP
    round trips but is never a way around the limit. A batch larger than the whole rate can never pass: it
    is refused at once (429, no Retry-After) with a message to split it.
    """

    scope = "submit"

    def __init__(self):  # the rate is read per request, so a changed setting applies (tests, reloads)
        pass

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request, view):
        ident = request.user.pk if request.user and request.user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    @staticmethod
    def cost(request, view) -> int:
        if getattr(view, "action", None) != "batch":
            return 1
        data = request.data
        jobs = data.get("jobs") if isinstance(data, dict) else None
        return max(1, min(len(jobs), settings.JOBS_BATCH_MAX)) if isinstance(jobs, list) else 1

    def allow_request(self, request, view):
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.key = self.get_cache_key(request, view)
        cost = self.cost(request, view)
        if cost > self.num_requests:
            raise exceptions.Throttled(detail=(
                f"A batch of {cost} jobs is more than the submit rate allows ({self.rate} per user); "
                f"split it into batches of at most {self.num_requests}."))
        try:
            self.history = self.cache.get(self.key, [])
        except Exception:  # noqa: BLE001 - any cache failure: Redis down, timeout, bad payload
            # Fail open: an accepted job must not depend on the cache. The limit is a courtesy to the shared
            # queue, and the database does not need it to stay consistent.
            log.warning("submit throttle: the cache is unreachable; allowing the request", exc_info=True)
            return True
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        self.missing = len(self.history) + cost - self.num_requests
        if self.missing > 0:
            return self.throttle_failure()
        self.history[:0] = [self.now] * cost  # newest first, one entry per job, as DRF keeps requests
        try:
            self.cache.set(self.key, self.history, self.duration)
        except Exception:  # noqa: BLE001 - as above
            log.warning("submit throttle: could not record the request in the cache", exc_info=True)
        return True

    def wait(self):
        """Seconds until enough of the oldest submissions leave the window for this one to fit."""
        return max(0.0, self.duration - (self.now - self.history[-self.missing]))


class QuoteThrottle(SimpleRateThrottle):
    """Per-user ``quote`` rate: the submit form asks for a quote as fields change (debounced), and each quote
    runs the engine once over a copy of the queue."""

    scope = "quote"

    def __init__(self):  # the rate is read per request, as for submissions
        pass

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view):
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except Exception:  # noqa: BLE001 - as for submissions: a courtesy limit never depends on the cache
            log.warning("quote throttle: the cache is unreachable; allowing the request", exc_info=True)
            return True

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


QUOTE_DESCRIPTION = (
    "Validates the body exactly as POST /api/v1/jobs does (400 with field errors) and submits nothing. "
    "Answers `estimated_cost` (milli-credits, worst case: max(base price, bid) x GPUs x pods x "
    "`max_runtime_s`, the hold placed at admission), `hold_s`, `base_price`, `rate`, `metered`, `available`, "
    "`affordable`; `needs_approval` with `approval_reasons`; `quota` (nominal, borrowing limit, GPUs the "
    "department uses, whether the job fits or must borrow); `free_gpus` of the flavor now; and `start`: the "
    "engine run on the current queue with this job added, read-only (`starts_now`, `estimated_start`, "
    "`code` and `message` of why it would wait, `borrowed` and the clearing `price` when it would borrow); and, "
    "for a resizable job, `size_range`: its cost at the size it would start at now and grown to its largest size, "
    "whose grown GPUs are borrowed, preemptible capacity at the clearing price (the hold stays the worst case).")


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = JobSerializer

    def get_queryset(self):
        qs = jobs_for(self.request.user, self.request.query_params if self.action == "list" else {})
        if self.action == "retrieve":
            qs = qs.prefetch_related(Prefetch("events", JobEvent.objects.select_related("actor")))
        return qs

    def get_object(self, action=VIEW, message=None):
        """The job the URL names, through the tenancy gate: 404 unless the user may see it, 403 unless they
        may ``action`` it."""
        return self.get_queryset().get_or_404(self.request.user, action, message=message, pk=self.kwargs["pk"])

    def get_serializer_class(self):
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def get_throttles(self):
        if self.action in ("create", "batch"):
            return [SubmitThrottle()]
        if self.action == "quote":
            return [QuoteThrottle()]
        return super().get_throttles()

    @extend_schema(parameters=FILTERS)
    def list(self, request, *args, **kwargs):
        array = request.query_params.get("array")
        if array is not None and not (array.isdigit() and int(array) <= MAX_ID):
            raise ValidationFailed(fields={"array": [{"code": "invalid", "message": "An array's id (a number)."}]})
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={201: JobDetailSerializer, 200: JobDetailSerializer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="Retry-safe submission: the same key returns the same job")],
    )
    def create(self, request):
        member(request.user)
        data = validated(JobSubmitSerializer, _from_template(request))
        key = _idempotency_key(request)
        job, created = job_submit(user=request.user, data=data, idempotency_key=key)
        if created:  # complete in memory: its relations came with the request, its timeline is one event
            _prefetched_timeline(job, [job.submission_event])
        else:  # a replay: render the stored job as it is now
            job = self.get_queryset().prefetch_related(
                Prefetch("events", JobEvent.objects.select_related("actor"))).get(pk=job.pk)
        body = JobDetailSerializer(job, context={"request": request}).data
        # Plain env that looks like a token is accepted, with a pointer to department secrets.
        body["warnings"] = token_warnings(data.get("env") or {})
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers={"Location": f"/api/v1/jobs/{job.pk}"})

    @extend_schema(
        request=JobBatchSubmitSerializer,
        responses={201: JobBatchSerializer, 200: JobBatchSerializer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="Retry-safe batch: the same key returns the same jobs (200)")],
        summary="Submit several jobs at once",
        description=(
            "All or nothing, in one transaction: every job is validated and submitted as by POST /api/v1/jobs "
            "(department and user tier from your membership, approval rules, timeline, pods after commit). "
            "A bad item answers 400 with field errors keyed by its position (`jobs.3.gpus`) and writes "
            "nothing. At most JOBS_BATCH_MAX (500) jobs; each job counts against the per-user submit rate."),
    )
    @action(detail=False, methods=["post"], url_path="batch")
    def batch(self, request):
        member(request.user)
        items = validated(JobBatchSubmitSerializer, request.data)["jobs"]
        jobs, created = job_submit_batch(user=request.user, items=items,
                                         idempotency_key=_idempotency_key(request))
        if not created:  # a replay: render the stored jobs as they are now, in the batch's order
            rows = jobs_for(request.user, {}).in_bulk([j.pk for j in jobs])
            jobs = [rows[j.pk] for j in jobs]
        body = JobBatchSerializer({"jobs": jobs}, context={"request": request}).data
        body["warnings"] = [f"jobs.{i}: {w}" for i, item in enumerate(items)
                            for w in token_warnings(item.get("env") or {})]
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=JobSubmitSerializer, responses={200: QuoteSerializer},
                   summary="Quote a job before submitting it", description=QUOTE_DESCRIPTION)
    @action(detail=False, methods=["post"], url_path="quote")
    def quote(self, request):
        member(request.user)
        body = validated(JobSubmitSerializer, _from_template(request))
        return Response(job_quote(user=request.user, data=body))

    @extend_schema(responses={200: JobEventSerializer(many=True)}, summary="The job's timeline (by role)",
                   parameters=[OpenApiParameter("role", str, description="A job of several roles: only the events "
                                                "of this role (its pods', and the reasons naming it); 400 for a name "
                                                "the job has not")],
                   description="Every event of the job, oldest first, each with the role it concerns (empty: the "
                   "whole job).")
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        job = self.get_object()
        events = job_events(job=job, role=request.query_params.get("role") or None)
        return Response(JobEventSerializer(events, many=True).data)

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, summary="The job's submission spec (clone it)",
                   parameters=[OpenApiParameter("add_data_workers", int, description="The clone with this many "
                                                "more CPU data workers (1-64): its restart-pod CPU role grown, or a "
                                                "data role added (docs/workloads.md, \"Add data workers\")")],
                   description="The fields POST /api/v1/jobs needs to submit this job again (or to save it as a "
                   "template): what was asked for, not what the portal decided. A deadline already passed is "
                   "left out.")
    @action(detail=True, methods=["get"])
    def spec(self, request, pk=None):
        spec = spec_of_job(self.get_object())
        if "add_data_workers" in request.query_params:  # the saw-tooth hint's clone: data workers added or grown
            try:
                count = int(request.query_params["add_data_workers"])
            except ValueError:
                raise ValidationFailed(fields={"add_data_workers": [
                    {"code": "invalid", "message": "An integer is required."}]}) from None
            spec = with_data_workers(spec, count)
        return Response(spec)

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT}, summary="A one-time connect URL (sessions)",
                   description="For the owner of a running session, or a member of a running service's department: "
                   "a URL that opens it in a browser on its own host (its one-time code is spent on first use and "
                   "expires in a minute). Anyone else: 404.")
    @action(detail=True, methods=["post"])
    def connect(self, request, pk=None):
        job = reachable(request.user, pk)
        if job is None:
            raise NotFound("No such session.")
        return Response({"url": connect_start(user=request.user, job=job), "route": route_url(job.pk)})

    @extend_schema(request=None, responses={201: OpenApiTypes.OBJECT}, summary="A key for a service's callers",
                   description="For a member of a running service's department: a bearer key (`gps_...`) good at "
                   "this service's route alone, until its horizon ends or the member leaves the department. "
                   "Callers send `Authorization: Bearer <key>`; the app never receives it. Shown once. "
                   "Anyone else: 404; a session or a service that does not run: 409.")
    @action(detail=True, methods=["post"], url_path="service-key")
    def service_key(self, request, pk=None):
        job = reachable(request.user, pk)
        if job is None:
            raise NotFound("No such service.")
        key, expires_at = service_key_issue(user=request.user, job=job)
        return Response({"key": key, "expires_at": expires_at, "route": route_url(job.pk)},
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=CancelSerializer, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object(CHANGE)
        body = validated(CancelSerializer, request.data or {})
        job_cancel(user=request.user, job=job, comment=body["comment"])
        job = self.get_queryset().prefetch_related("events").get(pk=job.pk)
        return Response(JobDetailSerializer(job, context={"request": request}).data)

    @extend_schema(request=None, responses=JobDetailSerializer, summary="Hold a waiting job",
                   description="It keeps its place in the queue (its submission time) but is not admitted until "
                   "released (reason `held`). The owner or a department admin; idempotent.")
    @action(detail=True, methods=["post"])
    def hold(self, request, pk=None):
        job_hold(user=request.user, job=self.get_object(CHANGE))
        return self._detail(pk)

    @extend_schema(request=None, responses=JobDetailSerializer, summary="Release a held job")
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        job_release(user=request.user, job=self.get_object(CHANGE))
        return self._detail(pk)

    @extend_schema(request=DependenciesSerializer, responses=JobDetailSerializer,
                   summary="Change what a waiting job waits for",
                   description="Replaces the job's dependencies (`after`, as at submission). A job or array of "
                   "another department, an unknown id, or a set that makes a cycle is a 400.")
    @action(detail=True, methods=["post"])
    def dependencies(self, request, pk=None):
        job = self.get_object(CHANGE)
        serializer = DependenciesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job_set_dependencies(user=request.user, job=job, after=serializer.validated_data["after"])
        return self._detail(pk)

    def _detail(self, pk):
        job = self.get_queryset().prefetch_related(Prefetch("events", JobEvent.objects.select_related("actor"))).get(
            pk=pk)
        return Response(JobDetailSerializer(job, context={"request": self.request}).data)

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description="Last N lines (default 200, max 5000)"),
                    OpenApiParameter("follow", bool, description="Stream new lines as they come (live attempt)"),
                    OpenApiParameter("attempt", int, description="Which attempt (default: the current one); "
                                     "an ended attempt's log is the tail kept when it ended"),
                    OpenApiParameter("pod", int, description="Which pod of a gang, by index (default 0); with "
                                     "role, by its rank in the role"),
                    OpenApiParameter("role", str, description="A job of roles: the role whose pod to read "
                                     "(400 for a name the job has not)"),
                    OpenApiParameter("timestamps", bool, description="Start each line with the time it was "
                                     "written (RFC 3339, UTC, up to nanoseconds) and a space"),
                    OpenApiParameter("since_time", str, description="Only lines written at this time stamp or "
                                     "later, all of them (tail is not applied): a follower resumes from the "
                                     "stamp of the last line it has")],
        responses={(200, "text/plain"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        job = self.get_object(CHANGE, "Only the job's owner and admins can read its logs.")
        fields = {}
        try:
            tail = max(1, min(5000, int(request.query_params.get("tail", 200))))
        except ValueError:
            fields["tail"] = [{"code": "invalid", "message": "An integer is required."}]
        try:
            attempt = int(request.query_params.get("attempt", job.attempt))
            if not 1 <= attempt <= job.attempt:
                fields["attempt"] = [{"code": "invalid",
                                      "message": f"This job has attempts 1 to {job.attempt}."}]
        except ValueError:
            fields["attempt"] = [{"code": "invalid", "message": "An integer is required."}]
        first, count = 0, job.all_pods  # the pods ``pod`` counts in: the job's, or one role's
        if "role" in request.query_params:
            found = role_pods(job, request.query_params["role"])
            if found is None:
                names = ", ".join(job.roles.order_by("index").values_list("name", flat=True))
                fields["role"] = [{"code": "invalid", "message": f"This job's roles are {names}."}]
            else:
                first, count = found
        try:
            pod = int(request.query_params.get("pod", 0))
            if not 0 <= pod < count:
                whose = f"Role {request.query_params['role']}" if "role" in request.query_params else "This job"
                fields["pod"] = [{"code": "invalid", "message": f"{whose} has pods 0 to {count - 1}."}]
            pod += first
        except ValueError:
            fields["pod"] = [{"code": "invalid", "message": "An integer (the pod's index) is required."}]
        since = None
        if "since_time" in request.query_params:
            since = parse_log_stamp(request.query_params["since_time"])
            if since is None:
                fields["since_time"] = [{"code": "invalid", "message": "A time stamp as the lines carry is "
                                         "required, e.g. 2026-01-31T12:00:00.123456789Z."}]
        if fields:
            raise ValidationFailed(fields=fields)
        follow = request.query_params.get("follow") in ("1", "true", "yes")
        timestamps = request.query_params.get("timestamps") in ("1", "true", "yes")
        try:
            lines, _source = attempt_log_lines(job=job, attempt=attempt, tail=tail, follow=follow, pod=pod,
                                               timestamps=timestamps, since=since)
        except BackendError as exc:  # no pod yet, not started, kubelet silent, API down: say so, never a 500
            raise LogsUnavailable(f"The job's logs are unavailable right now: {exc}") from exc
        return StreamingHttpResponse((line.rstrip("\n") + "\n" for line in lines),
                                     content_type="text/plain; charset=utf-8")


TEMPLATE_FIELDS = ("template", "template_id")


def _from_template(request):
    """The submission body, or, when it names a template ("template": name, or "template_id"), the template's
    spec with the body's other fields on top (the body wins), to be validated as any submission."""
    data = request.data
    if not isinstance(data, dict) or not any(k in data for k in TEMPLATE_FIELDS):
        return data
    if all(k in data for k in TEMPLATE_FIELDS):
        raise ValidationFailed("Name the template once.", fields={"template_id": [{
            "code": "invalid", "message": "Give either template (a name) or template_id, not both."}]})
    template = template_for_submission(user=request.user, name=data.get("template"),
                                       template_id=data.get("template_id"))
    return merged_spec(template, {k: v for k, v in data.items() if k not in TEMPLATE_FIELDS})


def _idempotency_key(request) -> str | None:
    return idempotency_key(request)


def _prefetched_timeline(job, events) -> None:
    """Set ``job.events`` as if prefetched (what Django's prefetch_related stores), for rendering only."""
    qs = job.events.all()
    qs._result_cache, qs._prefetch_done = list(events), True
    cache = getattr(job, "_prefetched_objects_cache", None)
    if cache is None:
        job._prefetched_objects_cache = cache = {}
    cache["events"] = qs
