"""The portal's REST API (``/api/v1``) from Python.

Results are plain dicts, exactly the JSON the portal answers (documented at ``/api/docs/``), not classes of
our own: a field the portal adds reaches you without a new client release, a job prints and serialises as
it is, and ``pandas.DataFrame(client.list(...))`` just works.
"""

from __future__ import annotations

import builtins
import email.utils
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx

from gpuportal import config, errors
from gpuportal.calendar import CalendarMixin
from gpuportal.sweeps import SweepsMixin

__all__ = ["Client", "FINAL_STATES", "JOB_DEFAULTS"]

FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
# What POST /api/v1/jobs fills in for a field left out.
# (A test keeps these equal to the portal's own defaults.)
JOB_DEFAULTS = {"pods": 1, "tier": "elastic", "max_runtime_s": 3600, "bid": 0}
# Answers after which the same request may be sent again: the portal was busy (503 "busy"), throttled the
# request (429 with Retry-After), or a proxy in front of it failed (502, 504).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
USER_AGENT = "gpu-portal-client/0.1"


def _job_id(job: int | str | dict) -> int:
    """A job given as its id, its id as text, or a job dict."""
    if isinstance(job, dict):
        job = job.get("id")
    if isinstance(job, bool):
        raise TypeError("A job id is an integer, not a bool.")
    try:
        value = int(job)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"Not a job id: {job!r}") from None
    if value < 1:
        raise ValueError(f"Not a job id: {job!r}")
    return value


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (both forms: delta-seconds and an HTTP date), None when absent."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _decode(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


class Client(SweepsMixin, CalendarMixin):
    """A session with the portal.

    ``Client(url, token)``, or ``Client.from_env()`` for ``GPU_PORTAL_URL``/``GPU_PORTAL_TOKEN`` or the config
    file that ``gpup login`` writes. ``url`` is the portal's address (``https://portal.example.org``); a URL
    ending in ``/api/v1`` works too.

    Retries: every request is retried on connection errors, 429 with ``Retry-After``, 502, 503 and 504, up to
    ``retries`` times, with exponential back-off and jitter (``backoff`` doubling up to ``max_backoff``
    seconds) that never waits less than the portal's ``Retry-After``. A ``Retry-After`` longer than
    ``max_retry_after`` is not waited out: ``RateLimited`` is raised with it. Submissions are safe to retry
    because each carries one Idempotency-Key for all its attempts; cancel is idempotent on the portal.

    ``sleep`` and ``monotonic`` are the clock of back-off and of ``wait``/``logs`` polling; tests and
    simulations pass their own to drive a simulated cluster between polls.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0, retries: int = 5, backoff: float = 0.5,
                 max_backoff: float = 30.0, max_retry_after: float = 120.0, verify: bool | str = True,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic):
        if not url or not token:
            raise ValueError("Client needs the portal's URL and an API token.")
        base = url.rstrip("/")
        if not base.endswith("/api/v1"):
            base += "/api/v1"
        self.url = base[: -len("/api/v1")]
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.max_retry_after = max_retry_after
        self.sleep, self.monotonic = sleep, monotonic
        self._http = httpx.Client(
            base_url=base + "/", timeout=timeout, verify=verify, transport=transport,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json", "User-Agent": USER_AGENT})

    @classmethod
    def from_env(cls, *, url: str | None = None, token: str | None = None, config_file=None, **kwargs) -> Client:
        """A client configured from the arguments, else the environment, else the config file."""
        url, token = config.resolve(url, token, path=config_file)
        return cls(url, token, **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # ------------------------------------------------------------------------------------------ plumbing

    def _pause(self, attempt: int, retry_after: float | None) -> None:
        delay = min(self.max_backoff, self.backoff * 2 ** attempt) * random.uniform(0.5, 1.0)
        self.sleep(max(delay, retry_after or 0.0))

    def _send(self, method: str, path: str, *, params: dict | None = None, json: Any = None,
              headers: dict | None = None, stream: bool = False) -> httpx.Response:
        """Send with retries. Returns a successful response (for ``stream``, still open: close it);
        raises the typed error otherwise."""
        attempt = 0
        while True:
            request = self._http.build_request(method, path, params=params, json=json, headers=headers)
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:  # connect, read, write, protocol: the answer may be lost
                if attempt >= self.retries:
                    raise errors.PortalUnreachable(
                        f"The portal at {self.url} could not be reached ({type(exc).__name__}: {exc}).",
                        code="unreachable") from exc
                self._pause(attempt, None)
                attempt += 1
                continue
            if response.is_success:
                return response
            if stream:
                response.read()
            retry_after = _retry_after(response)
            retryable = response.status_code in RETRY_STATUSES and (
                response.status_code != 429 or retry_after is not None)  # 429 without it: waiting won't help
            if retryable and attempt < self.retries and (retry_after or 0) <= self.max_retry_after:
                response.close()
                self._pause(attempt, retry_after)
                attempt += 1
                continue
            response.close()
            raise errors.from_response(response.status_code, _decode(response), retry_after=retry_after)

    def _json(self, method: str, path: str, **kwargs) -> Any:
        response = self._send(method, path, **kwargs)
        return response.json() if response.content else None

    # ------------------------------------------------------------------------------------------ who, what

    def whoami(self) -> dict:
        """``GET /me``: username, e-mail, and membership (department, role, user tier) or None."""
        return self._json("GET", "me")

    def flavors(self) -> list[dict]:
        return self._all("flavors", {})

    def cluster(self) -> dict:
        """GPUs per flavor: total, used, free, whole free nodes."""
        return self._json("GET", "cluster")

    def clusters(self) -> list[dict]:
        """The clusters jobs may run on: ``name``, ``labels``, ``state`` (active / cordoned / draining),
        ``is_default``, ``reachable``. Their labels are what ``cluster_selector`` (required) and
        ``cluster_preference`` (preferred) of a job name, e.g. ``submit(..., cluster_selector={"data": "campus"})``."""
        return self._json("GET", "clusters")

    # ------------------------------------------------------------------------------------------ jobs

    def submit(self, spec: dict | None = None, /, *, idempotency_key: str | None = None, **fields) -> dict:
        """Submit one job and return it (with its ``reason`` and timeline).

        ``spec`` is the job as a dict (the body of ``POST /api/v1/jobs``); keyword arguments are merged into
        it: ``submit(name="r50", image="...", command=[...], flavor="a100-80gb", gpus=2)``; with several
        clusters, ``cluster_selector={"region": "eu"}`` restricts it to clusters with those labels and
        ``cluster_preference`` ranks the ones that have them first (see ``clusters()``). One
        Idempotency-Key (``idempotency_key``, else a new random one) goes with every retry, so a lost answer
        retried never creates a second job. Pass your own key to make re-running a notebook cell safe too:
        the same key with the same body returns the job created the first time.
        """
        body = {**(spec or {}), **fields}
        key = idempotency_key or str(uuid.uuid4())
        return self._json("POST", "jobs", json=body, headers={"Idempotency-Key": key})

    def submit_from_template(self, template: str | int, /, *, idempotency_key: str | None = None,
                             **overrides) -> dict:
        """Submit a job from a template: by name (yours first, then your department's) or by id, with
        ``overrides`` replacing the template's fields of the same name (``gpus=4``, ``env={...}``). The result
        is validated as any submission."""
        ref = {"template_id": template} if isinstance(template, int) else {"template": template}
        return self.submit({**ref, **overrides}, idempotency_key=idempotency_key)

    def job_spec(self, job: int | str | dict, *, add_data_workers: int | None = None) -> dict:
        """``GET /jobs/<id>/spec``: what submitting ``job`` again needs (clone it: ``submit(job_spec(j))``).
        ``add_data_workers``: the clone with that many more CPU data workers (the saw-tooth hint's)."""
        params = {"add_data_workers": add_data_workers} if add_data_workers else None
        return self._json("GET", f"jobs/{_job_id(job)}/spec", params=params)

    # ------------------------------------------------------------------------------------------ templates

    def teams(self) -> builtins.list[dict]:
        """``GET /teams``: the teams you see (your department's as its admin, every one as a platform admin, your
        own team otherwise), each with its ``quotas`` (per flavor: nominal, borrowing and lending limits) and
        ``members`` (with ``team_admin``)."""
        return self._json("GET", "teams")

    def team_quota(self, department: str, team: str, flavor: str, *, nominal: int,
                   borrowing_limit: int | None = None, lending_limit: int | None = None) -> dict:
        """``PUT /teams/{department}/{team}/quotas/{flavor}``: a team's split of a flavor (its department's
        admins; its team admins may change the limits only). Returns the team."""
        body = {"nominal": nominal, "borrowing_limit": borrowing_limit, "lending_limit": lending_limit}
        return self._json("PUT", f"teams/{department}/{team}/quotas/{flavor}", json=body)

    def templates(self, *, scope: str | None = None) -> builtins.list[dict]:
        """Your templates and your department's (``scope="personal"`` or ``"department"`` for one kind)."""
        return self._json("GET", "templates", params={"scope": scope} if scope else None)

    def template(self, template: str | int) -> dict:
        """One template, by id or by name (yours first, then your department's)."""
        return self._json("GET", f"templates/{self._template_id(template)}")

    def template_save(self, name: str, spec: dict, *, department: bool = False, description: str = "") -> dict:
        """Save ``spec`` (a job submission body) as a template named ``name``: yours, or with ``department``
        your department's (department admins). A spec that would not submit raises ``ValidationError`` with
        the submission's field errors (``spec.gpus``)."""
        body = {"name": name, "spec": spec, "description": description,
                "scope": "department" if department else "personal"}
        return self._json("POST", "templates", json=body)

    def template_update(self, template: str | int, **fields) -> dict:
        """Change a template's ``name``, ``description`` or ``spec``."""
        return self._json("PATCH", f"templates/{self._template_id(template)}", json=fields)

    def template_delete(self, template: str | int) -> None:
        self._send("DELETE", f"templates/{self._template_id(template)}").close()

    def _template_id(self, template: str | int) -> int:
        if isinstance(template, int):
            return template
        found = sorted((t for t in self.templates() if t["name"] == template),
                       key=lambda t: (t["scope"] != "personal", t["id"]))
        if not found:
            raise errors.NotFound(f"No template named {template!r} of yours or of your department.", status=404,
                                  code="not_found")
        return found[0]["id"]

    def submit_batch(self, specs: Iterable[dict], *, idempotency_key: str | None = None) -> list[dict]:
        """Submit several jobs at once, all or nothing (at most 500; each counts against the submit rate).
        A bad item raises ``ValidationError`` with fields such as ``jobs.3.gpus``, and nothing is created.
        Returns the jobs in the order given."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"jobs": builtins.list(specs)}
        return self._json("POST", "jobs/batch", json=body, headers={"Idempotency-Key": key})["jobs"]

    def get(self, job: int | str | dict) -> dict:
        """The job as it is now: ``state``, ``reason`` (code, message, detail), ``estimated_start``,
        ``queue_position`` and its timeline (``events``)."""
        return self._json("GET", f"jobs/{_job_id(job)}")

    def iter_jobs(self, *, state: str | Iterable[str] | None = None, tier: str | Iterable[str] | None = None,
                  flavor: str | None = None, mine: bool = False, department: str | None = None,
                  q: str | None = None, page_size: int = 200) -> Iterator[dict]:
        """Jobs one by one, newest first, fetching page after page as needed. Filters as in ``list``."""
        params: dict[str, Any] = {}
        for name, value in (("state", state), ("tier", tier)):
            if value:
                params[name] = value if isinstance(value, str) else ",".join(value)
        if flavor:
            params["flavor"] = flavor
        if mine:
            params["mine"] = "1"
        if department:
            params["department"] = department
        if q:
            params["q"] = q
        yield from self._iter_pages("jobs", params, page_size)

    def list(self, *, state: str | Iterable[str] | None = None, tier: str | Iterable[str] | None = None,
             flavor: str | None = None, mine: bool = False, department: str | None = None, q: str | None = None,
             limit: int | None = None, page_size: int = 200) -> list[dict]:
        """Your department's jobs (every department's for platform admins), all pages, as a list of dicts:
        ``pandas.DataFrame(client.list(mine=True))``.

        ``state`` and ``tier`` take one value or several (``state=["queued", "running"]``); ``mine`` keeps
        your own jobs; ``department`` (platform admins) one department; ``q`` names containing it;
        ``limit`` stops after that many jobs.
        """
        out = []
        for job in self.iter_jobs(state=state, tier=tier, flavor=flavor, mine=mine, department=department, q=q,
                                  page_size=page_size):
            if limit is not None and len(out) >= limit:
                break
            out.append(job)
        return out

    def queue(self, *, flavor: str | None = None, limit: int | None = None, page_size: int = 200) -> builtins.list[dict]:
        """``GET /queue``: every department's queued jobs, each flavor's queue in the engine's order (by flavor
        name, then ``position``), with ``tier``, ``gpus``, ``pods``, ``waiting_s``, ``estimated_start`` and the
        ``reason`` code. Your department's jobs (``own``: true) also carry ``id``, ``name``, ``owner`` and
        ``reason_message``; another department's show only its ``department`` and size. ``flavor``: one queue."""
        out: builtins.list[dict] = []
        for row in self._iter_pages("queue", {"flavor": flavor} if flavor else {}, page_size):
            if limit is not None and len(out) >= limit:
                break
            out.append(row)
        return out

    def _iter_pages(self, path: str, params: dict, page_size: int = 200) -> Iterator[dict]:
        """Every item of a paginated list. A job submitted meanwhile shifts the pages by one; a job already
        returned is not returned again."""
        seen: set = set()
        page = 1
        while True:
            body = self._json("GET", path, params={**params, "page": page, "page_size": page_size})
            if isinstance(body, builtins.list):  # an endpoint without pagination
                yield from body
                return
            for item in body.get("results", []):
                key = item.get("id") if isinstance(item, dict) else None
                if key is not None and key in seen:
                    continue
                if key is not None:
                    seen.add(key)
                yield item
            if not body.get("next"):
                return
            page += 1

    def _all(self, path: str, params: dict) -> list:
        return builtins.list(self._iter_pages(path, params))

    def cancel(self, job: int | str | dict, *, comment: str = "") -> dict:
        """Cancel the job and return it. Cancelling an already cancelled job returns it again; a job that
        already succeeded or failed raises ``Conflict`` (``invalid_state``)."""
        return self._json("POST", f"jobs/{_job_id(job)}/cancel", json={"comment": comment} if comment else {})

    def connect(self, job: int | str | dict) -> dict:
        """A one-time URL that opens your running session (or service) in a browser: ``{"url", "route"}``. The
        code in it is spent on first use and expires within a minute; anyone but the owner gets ``NotFound``."""
        return self._json("POST", f"jobs/{_job_id(job)}/connect")

    def service_key(self, job: int | str | dict) -> dict:
        """A key for calling a running service (an inference endpoint) of your department at its route:
        ``{"key", "expires_at", "route"}``; send ``Authorization: Bearer <key>`` there. The key is good at that
        service's route alone, until the service's horizon or until you leave the department, and is shown
        once. Your API token is no credential at a route: it never leaves for a service's host, where an app
        that logs its headers would see it. A session, or a service that does not run, raises ``Conflict``;
        anyone outside the department gets ``NotFound``."""
        return self._json("POST", f"jobs/{_job_id(job)}/service-key")

    def cost(self, job: int | str | dict) -> dict:
        """The job's hold, cost to date and final charge, in milli-credits."""
        return self._json("GET", f"jobs/{_job_id(job)}/cost")

    # ------------------------------------------------------------------------------------------ secrets

    def secrets(self) -> builtins.list[dict]:
        """Your department's secrets: ``name``, ``kind``, ``purpose``, ``keys``, ``values`` ("set", never the
        values), ``updated_at``. A job uses one with ``secrets=[{"secret": "wandb", "key": "api_key",
        "env": "WANDB_API_KEY"}]`` or ``[{"secret": "hf", "path": "/etc/secrets/hf"}]``."""
        return self._json("GET", "secrets")

    def secret_set(self, name: str, values: dict[str, str], *, purpose: str | None = None) -> dict:
        """Set the values of the department secret ``name`` (department admins): rotates an existing one (every
        value replaced), else declares a new one kept by the portal. Returns it, without its values."""
        try:
            return self._json("PATCH", f"secrets/{name}", json={"values": values})
        except errors.NotFound:
            body: dict = {"name": name, "kind": "value", "values": values}
            if purpose:
                body["purpose"] = purpose
            return self._json("POST", "secrets", json=body)

    # ------------------------------------------------------------------------------------------ quote

    def quote(self, spec: dict | None = None, /, **fields) -> dict:
        """What a job would cost, whether it would wait for approval, and when it would start, before
        submitting it: ``POST /api/v1/jobs/quote``. The portal validates the job exactly as ``submit`` would
        (``ValidationError`` with the same fields) and submits nothing.

        Returns a dict: ``flavor``, ``tier``, ``gpus_total``, ``gpu_hours`` (at most), ``hold_s``,
        ``base_price``, ``bid`` and ``rate`` (milli-credits per GPU-hour), ``estimated_cost`` (milli-credits,
        worst case: the hold placed at admission), ``estimated_credits``, ``metered``, ``available`` (None
        when not metered), ``affordable``, ``needs_approval`` and ``approval_reasons``, ``free_gpus`` of the
        flavor right now, ``quota`` (``nominal``, ``borrowing_limit``, ``used``, ``fits``, ``must_borrow``,
        ``message``) and ``start`` (``starts_now``, ``estimated_start`` as ISO 8601 or None, ``code`` and
        ``message``: the engine's own estimate for the queue as it is now). A resizable job (``min_pods``) also
        gets ``size_range``: ``cost_at_start`` at ``start_pods`` (the size it would start at now),
        ``cost_at_largest`` grown to ``max_pods`` (its grown GPUs borrowed, preemptible capacity at ``grow_rate``,
        the clearing price now) and ``hold`` (the worst case); None for any other job.
        """
        return self._json("POST", "jobs/quote", json={**(spec or {}), **fields})

    def recommendation(self, name: str = "", *, image: str = "", flavor: str | None = None,
                       tier: str | None = None) -> dict:
        """What your similar past jobs (this name's family, else this image) used and what to ask for:
        ``GET /api/v1/recommendations``. With ``flavor`` a flavor that shares its GPUs, ``fraction`` is the part
        of one GPU the job fits in (``share``, ``gpu_memory_gib`` / ``gpu_cores`` or ``gpu_replicas``), priced
        at ``tier`` against the whole GPUs (``credits_per_hour``, ``whole_credits_per_hour``), with the
        ``source`` of the measurement; None when no fraction fits."""
        params = {k: v for k, v in (("name", name), ("image", image), ("flavor", flavor), ("tier", tier)) if v}
        return self._json("GET", "recommendations", params=params)

    # ------------------------------------------------------------------------------------------ logs

    def logs(self, job: int | str | dict, *, follow: bool = False, tail: int = 200,
             poll_interval: float = 2.0, pod: int = 0, role: str | None = None) -> Iterator[str]:
        """The job's log lines (the current attempt's pod ``pod``, by index: 0 is a gang's rank 0), without
        line endings. ``role``: a job of roles' role, ``pod`` then being the pod's rank in it. A pod or a role
        the job does not have raises ``ValidationFailed`` (400).

        Without ``follow``: the last ``tail`` lines, now. With ``follow``: those, then new lines as they come,
        until the job ends (also through a job that is still queued, or requeued after a preemption: a new
        attempt starts a new log). When the portal's stream ends while the job goes on, it reconnects every
        ``poll_interval`` seconds from the time stamp of the last line given, so no line comes twice.
        """
        jid = _job_id(job)
        if not follow:
            yield from self._log_lines(jid, {"tail": max(1, min(5000, tail))}, pod=pod, role=role)
            return
        cursor = _LogCursor()
        attempt = None
        first = True
        while True:
            state = self.get(jid)
            if state.get("attempt") != attempt:
                attempt = state.get("attempt")
                cursor = _LogCursor()  # a new attempt writes a new log
            finished = state["state"] in FINAL_STATES
            params = {**cursor.params(tail=tail if first else 5000), "timestamps": "1"}
            if not finished:
                params["follow"] = "1"
            try:
                for line in self._log_lines(jid, params, pod=pod, role=role):
                    text = cursor.feed(line)
                    if text is not None:
                        yield text
                first = False
            except errors.Conflict as exc:
                if exc.code != "logs_unavailable":
                    raise
                # No pod yet (queued, awaiting approval) or none any more: wait for one, or stop below.
            if finished:
                return
            self.sleep(poll_interval)

    def _log_lines(self, jid: int, params: dict, *, pod: int = 0, role: str | None = None) -> Iterator[str]:
        if pod:
            params = {**params, "pod": pod}
        if role:
            params = {**params, "role": role}
        response = self._send("GET", f"jobs/{jid}/logs", params=params, stream=True,
                              headers={"Accept": "text/plain, application/json"})
        try:
            yield from response.iter_lines()
        finally:
            response.close()

    # ------------------------------------------------------------------------------------------ wait

    def wait(self, job: int | str | dict, *, timeout: float | None = None, poll_interval: float = 5.0,
             progress: bool = False, on_change: Callable[[dict], None] | None = None,
             raise_on_failure: bool = True) -> dict:
        """Poll the job until it succeeds, fails or is cancelled; return it as it ended.

        Raises ``JobFailed`` or ``JobCancelled`` (with ``.job``) unless ``raise_on_failure`` is False, and
        ``WaitTimeout`` when ``timeout`` seconds pass first. ``progress=True`` shows a tqdm line with the
        state, the reason it waits, its queue position and estimated start (needs ``tqdm``: the ``progress``
        extra). ``on_change(job)`` is called with the job each time its state or reason changes.
        """
        jid = _job_id(job)
        bar = _Progress(jid) if progress else None
        deadline = None if timeout is None else self.monotonic() + timeout
        last = None
        try:
            while True:
                current = self.get(jid)
                seen = (current["state"], (current.get("reason") or {}).get("code"), current.get("attempt"))
                if bar is not None:
                    bar.update(current)
                if seen != last and on_change is not None:
                    on_change(current)
                last = seen
                if current["state"] in FINAL_STATES:
                    break
                if deadline is not None and self.monotonic() >= deadline:
                    raise errors.WaitTimeout(
                        f"Job {jid} is still {current['state']} after {timeout:g} s.", job=current, code="timeout")
                pause = poll_interval if deadline is None else min(poll_interval,
                                                                   max(0.0, deadline - self.monotonic()))
                self.sleep(pause)
        finally:
            if bar is not None:
                bar.close()
        if raise_on_failure and current["state"] == "failed":
            raise errors.JobFailed(f"Job {jid} failed: {_why(current)}", job=current)
        if raise_on_failure and current["state"] == "cancelled":
            raise errors.JobCancelled(f"Job {jid} was cancelled: {_why(current)}", job=current)
        return current


def _why(job: dict) -> str:
    reason = job.get("reason") or {}
    text = reason.get("message") or reason.get("code") or job.get("state", "")
    said = f"exit code {job.get('exit_code')}"
    if job.get("exit_code") not in (None, 0) and said not in text:  # the portal's reason often says it already
        text += f" ({said})"
    return text


def describe_wait(job: dict) -> str:
    """One line about a job for humans: state, reason, queue position and estimated start."""
    reason = job.get("reason") or {}
    parts = [job["state"]]
    if reason.get("code") and job["state"] not in FINAL_STATES | {"running"}:
        parts.append(reason["code"])
    if job.get("queue_position"):
        parts.append(f"#{job['queue_position']} in queue")
    eta = job.get("estimated_start")
    if eta and job["state"] in ("queued", "preempted", "pending_approval"):
        try:
            when = datetime.fromisoformat(eta.replace("Z", "+00:00"))
            minutes = max(0, round((when - datetime.now(UTC)).total_seconds() / 60))
            parts.append(f"ETA {when.astimezone():%H:%M} (in {minutes} min)")
        except ValueError:
            parts.append(f"ETA {eta}")
    return " | ".join(parts)


class _Progress:
    """A tqdm line that follows a job: its description is the state and why; it ticks once per poll."""

    def __init__(self, jid: int):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            raise ImportError("progress=True needs tqdm: pip install 'gpu-portal-client[progress]'") from None
        self._bar = tqdm(desc=f"job {jid}", total=None, unit=" polls", bar_format="{desc} [{elapsed}]",
                         dynamic_ncols=True, leave=True)
        self._text = ""

    def update(self, job: dict) -> None:
        text = f"job {job['id']}: {describe_wait(job)}"
        # A change is always shown; tqdm would skip a redraw within its minimum interval of the last one.
        self._bar.set_description_str(text, refresh=text != self._text)
        self._text = text
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


class _LogCursor:
    """Where a follower is in a log, so that a reconnection gives every line once.

    The portal stamps each line with the time it was written (``timestamps``), never decreasing along a log,
    and answers ``since_time=T`` with every line stamped T or later. The cursor is the stamp of the last line
    given and how many lines given carry it: a reconnection asks from that stamp and skips that many lines of
    it, which are the ones given (the log's lines of one instant come in the order they were written). So no
    line is lost (each later line is stamped T or later) and none is given twice. A line without a stamp (a log
    kept by a portal from before stamps) is given as it comes.
    """

    def __init__(self):
        self.stamp: str | None = None
        self.count = 0  # lines given with ``stamp``
        self.skip = 0  # lines of ``stamp`` still to skip in this stream

    def params(self, *, tail: int) -> dict:
        self.skip = self.count
        if self.stamp is None:
            return {"tail": max(1, min(5000, tail))}
        return {"since_time": self.stamp}

    def feed(self, line: str) -> str | None:
        """The line without its stamp, or None when it was given before."""
        stamp, sep, text = line.partition(" ")
        if not sep or not _STAMP.fullmatch(stamp):
            return line
        if stamp == self.stamp:
            if self.skip:
                self.skip -= 1
                return None
            self.count += 1
        else:
            self.stamp, self.count, self.skip = stamp, 1, 0
        return text


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
