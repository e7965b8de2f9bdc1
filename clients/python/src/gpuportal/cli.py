"""gpup: the GPU portal from a terminal, on the same client as notebooks.

Exit codes (scripts can rely on them):

    0  success
    1  the job failed or was cancelled (wait, submit --wait)
    2  usage or input error: bad options, an unreadable or invalid job file, a job the portal refused (400, 422)
    3  not found (404), including another department's job
    4  not logged in, a bad token, or not allowed (401, 403); also no configuration at all
    5  the portal is unreachable or failed (connection errors, 5xx)
    6  conflict: the job's state does not allow this (409), e.g. cancelling a finished job
    7  rate limited (429) beyond what gpup waits out
    8  wait --timeout ran out (the job goes on)

Shell completion: ``eval "$(gpup completion bash)"`` (or zsh, fish).
"""

from __future__ import annotations

import json
import os
import sys
import webbrowser
from pathlib import Path

import click

from gpuportal import __version__, cli_calendar, cli_sweeps, config
from gpuportal.cli_base import (
    USAGE,
    State,
    command,
    emit,
    fail,
    fraction_text,
    print_table,
    when,
)
from gpuportal.client import Client, describe_wait


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar=config.ENV_URL, help="The portal's address (default: $GPU_PORTAL_URL, the config).")
@click.option("--token", envvar=config.ENV_TOKEN, help="API token (default: $GPU_PORTAL_TOKEN, the config).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar=config.ENV_CONFIG, help="Config file (default: ~/.config/gpu-portal/config.toml).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON on stdout).")
@click.option("--retries", type=click.IntRange(0, 20), default=5, show_default=True,
              help="Retries of a request on connection errors, 429, 502-504 (0: fail fast).")
@click.version_option(version=__version__, prog_name="gpup", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx, url, token, config_file, as_json, retries):
    """The GPU portal from a terminal. Exit codes: 0 ok, 1 job failed or cancelled, 2 usage or invalid input,
    3 not found, 4 not logged in or not allowed, 5 portal unreachable or failing, 6 conflict, 7 rate limited,
    8 wait timed out."""
    ctx.obj = State(url, token, config_file, as_json, retries)
    ctx.call_on_close(ctx.obj.close)


# ------------------------------------------------------------------------------------------ job files


def load_jobs(path: str) -> list[dict] | dict:
    """A job file (YAML or JSON, ``-`` for stdin): one job (a mapping), or several (a list, or a mapping
    with a ``jobs`` list) for a batch."""
    import yaml

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}", USAGE)
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text", USAGE)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 1}, column {mark.column + 1})"
        problem = getattr(exc, "problem", None) or str(exc)
        fail(f"{path} is not valid YAML{where}: {problem}", USAGE)
    if isinstance(data, dict) and set(data) == {"jobs"}:
        data = data["jobs"]
    if isinstance(data, list):
        if not data or not all(isinstance(item, dict) for item in data):
            fail(f"{path}: a list of jobs must hold one or more mappings (name: ..., image: ..., ...)", USAGE)
        return data
    if not isinstance(data, dict):
        fail(f"{path}: expected a job (a mapping of fields such as name, image, command, flavor, gpus), "
             f"got {type(data).__name__}", USAGE)
    return data


# ------------------------------------------------------------------------------------------ output


def print_job(job: dict) -> None:
    reason = job.get("reason") or {}
    rows = [
        ("job", f"{job['id']}  {job['name']}"),
        ("state", job["state"]),
        ("why", f"{reason.get('code') or '-'}: {reason.get('message') or ''}".rstrip(": ")),
        ("owner", f"{job['owner']} ({job['department']})"),
        ("resources", f"{job['pods']} x {fraction_text(job)} {job['flavor']}, {job['tier']}, {job['urgency']}"),
        *([("topology", f"within one {job['topology_level']} "
                        f"({'required' if job.get('topology_required') else 'preferred'})")]
          if job.get("topology_level") else []),
        ("image", job["image"]),
        ("command", " ".join(job.get("command") or [])),
    ]
    size = job.get("size")
    if size:  # a resizable job: its size now (none while queued), its range, a resize under way
        now = f"{size['pods']} of " if size.get("pods") is not None else ""
        text = f"{now}{size['min_pods']}..{size['max_pods']} pods"
        rz = size.get("resize")
        if rz:
            text += (f" ({'growing' if rz['to'] > rz['from'] else 'shrinking'} to {rz['to']} at its checkpoint, "
                     f"{rz['state']})")
        rows.append(("size", text))
    roles = job.get("roles") or []
    if len(roles) > 1 or (roles and roles[0].get("name") != "main"):  # a job of roles: its size is theirs
        rows.append(("roles", "; ".join(
            f"{r['name']} {r['pods']} x " + (f"{r['gpus']} GPUs, " if r.get("gpus") else "")
            + f"cpu {r.get('cpu')}, memory {r.get('memory')}"
            + (f" ({r['failure_policy']})" if r.get("failure_policy", "restart-attempt") != "restart-attempt" else "")
            for r in roles)))
    if job.get("secrets"):  # names and keys only: the portal never returns a value
        rows.append(("secrets", "; ".join(f"{u['env']} <- {u['secret']}/{u['key']}" if "env" in u
                                          else f"{u['path']} <- {u['secret']}" for u in job["secrets"])))
    if job.get("mounts"):
        access = {True: "read-only", False: "read-write"}
        rows.append(("mounts", "; ".join(f"{m['path']} <- {m['source']} ({access[m.get('read_only', True)]})"
                                         for m in job["mounts"])))
    if job.get("checkpoint"):  # the same directory for every attempt, in PORTAL_CHECKPOINT_DIR
        c = job["checkpoint"]
        rows.append(("checkpoint", f"{c['path']} <- {c['source']}:{c['sub_path']}"
                                   + (" (deleted)" if c.get("deleted_at") else "")))
    if (job.get("attempt") or 1) > 1:
        rows.append(("attempt", f"{job['attempt']} ({job.get('retries', 0)} retries, "
                                f"{job.get('preemption_count', 0)} preemptions)"))
    if job.get("queue_position"):
        rows.append(("queue", f"#{job['queue_position']}"))
    if job.get("estimated_start"):
        rows.append(("estimated start", when(job["estimated_start"])))
    for name in ("submitted_at", "started_at", "finished_at"):
        if job.get(name):
            rows.append((name.replace("_at", ""), when(job[name])))
    if job.get("exit_code") is not None:
        rows.append(("exit code", str(job["exit_code"])))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    if job.get("events"):
        click.echo("timeline")
        for e in job["events"]:
            move = f"{e.get('from_state') or 'new'} -> {e.get('to_state')}" if e.get("to_state") else e.get("kind")
            role = f"[{e['role']}]  " if e.get("role") else ""  # a job of several roles: whose pod it was
            click.echo(f"  {when(e['at'])}  {move}  {role}{e.get('message') or ''}".rstrip())


# ------------------------------------------------------------------------------------------ commands


@cli.command()
@click.option("--url", "login_url", help="The portal's address, e.g. https://portal.example.org.")
@click.option("--token", "login_token", help="An API token (gpp_...); asked for, hidden, when not given.")
@command
def login(state: State, login_url, login_token):
    """Check a URL and token with the portal, then store them in the config file (mode 0600)."""
    url = login_url or state.url or click.prompt("Portal URL")
    token = login_token or state.token or click.prompt("API token", hide_input=True)
    with Client(url, token, retries=min(state.retries, 1)) as client:
        me = client.whoami()
    try:
        path = config.write_config(url, token, path=state.config_file)
    except OSError as exc:
        fail(f"cannot write the config file: {exc}", USAGE)
    emit(state, {"username": me["username"], "url": url, "config": str(path)},
         lambda d: click.echo(f"logged in to {d['url']} as {d['username']}; saved in {d['config']}"))


@cli.command()
@command
def whoami(state: State):
    """Who the token belongs to: user, department, role."""
    me = state.client().whoami()

    def human(me):
        m = me.get("membership")
        where = f"{m['role']} in {m['department']} ({m['user_tier']})" if m else "not a member of any department"
        click.echo(f"{me['username']} at {state.client().url}: {where}")

    emit(state, me, human)


def parse_sets(sets: tuple[str, ...]) -> dict:
    """``--set FIELD=VALUE`` overrides, each value read as YAML (``gpus=2`` is a number, ``command=[a, b]`` a
    list, ``env={A: "1"}`` a mapping)."""
    import yaml

    out = {}
    for item in sets:
        field, eq, raw = item.partition("=")
        if not eq or not field.strip():
            fail(f"--set {item!r}: use FIELD=VALUE, e.g. --set gpus=2", USAGE)
        try:
            out[field.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            fail(f"--set {item!r}: the value is not valid YAML", USAGE)
    return out


@cli.command()
@click.option("-f", "--file", "path", help="Job file (YAML or JSON; - for stdin); with --template, its overrides.")
@click.option("-t", "--template", help="Start from this template (yours first, then your department's).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="Override one field (repeatable), e.g. --set gpus=4 --set name=run-2.")
@click.option("--key", help="Idempotency-Key: re-running with the same key and file never duplicates jobs.")
@click.option("--wait", "wait_", is_flag=True, help="Then wait for the job to end (exit 1 if it fails).")
@click.option("--array", help="Submit a job array: 0-63%8 is 64 tasks, at most 8 at once ({{index}} in the "
              "command and env is each task's index).")
@click.option("-d", "--dependency", "after", help="Wait for other jobs: afterok:12, afterany:a7 (array 7), "
              "afternotok:12:13; several joined by commas.")
@click.option("--within", metavar="LEVEL", help="Prefer that the pods sit within one domain of a topology level "
              "of the cluster (rack, block, or its label key); they spread when no domain has room.")
@click.option("--require-within", "require_within", metavar="LEVEL",
              help="The same, required: the job waits rather than spread.")
@command
def submit(state: State, path, template, sets, key, wait_, array, after, within, require_within):
    """Submit the job (or the list of jobs, as one all-or-nothing batch) in a file, or one from a template."""
    if path is None and template is None:
        fail("give a job file (-f FILE) or a template (--template NAME)", USAGE)
    if within and require_within:
        fail("give --within (preferred) or --require-within (required), not both", USAGE)
    spec = load_jobs(path) if path is not None else {}
    client = state.client()
    if after:
        sets = (*sets, f"after={json.dumps(after)}")  # JSON is YAML: the text stays a string
    if within or require_within:
        sets = (*sets, f"topology_level={json.dumps(within or require_within)}",
                f"topology_required={'true' if require_within else 'false'}")
    if array is not None:
        return cli_sweeps.submit_array(state, spec if isinstance(spec, dict) else fail("--array takes one job", USAGE),
                            array=array, template=template, overrides=parse_sets(sets), key=key)
    if isinstance(spec, list):
        if template or sets:
            fail("--template and --set apply to one job: the file holds a list", USAGE)
        jobs = client.submit_batch(spec, idempotency_key=key)
        emit(state, jobs, lambda js: [click.echo(f"submitted job {j['id']} {j['name']}: {j['state']}")
                                      for j in js])
        return
    spec = {**spec, **parse_sets(sets)}
    if template is not None:
        job = client.submit_from_template(template, idempotency_key=key, **spec)
    else:
        job = client.submit(spec, idempotency_key=key)
    for warning in job.get("warnings") or []:  # e.g. a token in plain env: said, not refused
        click.echo(f"gpup: warning: {warning}", err=True)
    if not wait_:
        emit(state, job, lambda j: click.echo(f"submitted job {j['id']} {j['name']}: {describe_wait(j)}"))
        return
    if not state.json:
        click.echo(f"submitted job {job['id']} {job['name']}")
    _wait(state, job["id"], timeout=None, interval=5.0, progress=None)


@cli.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--add-data-workers", "workers", type=click.IntRange(1, 64),
              help="Add this many CPU data workers (or grow the job's restart-pod CPU role by as many).")
@click.option("--submit", "submit_", is_flag=True, help="Submit the clone at once instead of printing it.")
@command
def clone(state: State, job_id, workers, submit_):
    """A job's submission spec as a job file (to edit, then gpup submit -f), or submitted with --submit."""
    import yaml

    spec = state.client().job_spec(job_id, add_data_workers=workers)
    if not submit_:
        click.echo(json.dumps(spec, indent=2) if state.json else yaml.safe_dump(spec, sort_keys=False), nl=False)
        return
    job = state.client().submit(spec)
    emit(state, job, lambda j: click.echo(f"submitted job {j['id']} {j['name']}: {describe_wait(j)}"))


def print_templates(rows: list[dict]) -> None:
    if not rows:
        click.echo("no templates (gpup template save NAME --from-job ID)")
        return
    click.echo(f"{'ID':>5}  {'NAME':<24} {'SCOPE':<10} {'IMAGE':<40} GPUS")
    for t in rows:
        spec = t.get("spec") or {}
        gpus = f"{spec.get('gpus', '?')}x{spec.get('pods', 1)} {spec.get('flavor', '')}"
        click.echo(f"{t['id']:>5}  {t['name']:<24} {t['scope']:<10} {str(spec.get('image', ''))[:40]:<40} {gpus}")


@cli.command()
@click.option("--scope", type=click.Choice(["personal", "department"]), help="Only one kind.")
@command
def templates(state: State, scope):
    """List your job templates and your department's."""
    emit(state, state.client().templates(scope=scope), print_templates)


@cli.group()
def template():
    """Save, show or delete a job template."""


@template.command("save")
@click.argument("name")
@click.option("--from-job", "job_id", type=click.IntRange(min=1), help="Save this job's submission as it was.")
@click.option("-f", "--file", "path", help="Save the job in this file (YAML or JSON; - for stdin).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help="Change one field (repeatable).")
@click.option("--department", is_flag=True, help="For the whole department (department admins).")
@click.option("-d", "--description", default="", help="What the template is for.")
@command
def template_save(state: State, name, job_id, path, sets, department, description):
    """Save a job (--from-job ID) or a job file (-f FILE) as the template NAME."""
    if (job_id is None) == (path is None):
        fail("give either --from-job ID or -f FILE", USAGE)
    client = state.client()
    if path is not None:
        spec = load_jobs(path)
        if isinstance(spec, list):
            fail(f"{path}: a template is one job, the file holds a list", USAGE)
    else:
        spec = client.job_spec(job_id)
    saved = client.template_save(name, {**spec, **parse_sets(sets)}, department=department,
                                 description=description)
    emit(state, saved, lambda t: click.echo(f"saved template {t['name']} ({t['scope']}, id {t['id']})"))


@template.command("show")
@click.argument("name")
@command
def template_show(state: State, name):
    """A template's spec (YAML; --json for JSON)."""
    import yaml

    emit(state, state.client().template(_ref(name)),
         lambda t: click.echo(yaml.safe_dump(t["spec"], sort_keys=False, default_flow_style=False), nl=False))


@template.command("delete")
@click.argument("name")
@command
def template_delete(state: State, name):
    """Delete a template (yours, or your department's as its admin)."""
    state.client().template_delete(_ref(name))
    emit(state, {"deleted": name}, lambda _: click.echo(f"deleted template {name}"))


def _ref(name: str) -> str | int:
    """A template named on the command line: an id if it is a number, else a name."""
    return int(name) if name.isdigit() else name


@cli.command("ls")
@click.option("--state", "states", help="Comma-separated states, e.g. queued,running.")
@click.option("--tier", help="Comma-separated tiers.")
@click.option("--flavor")
@click.option("--all", "everyone", is_flag=True, help="The whole department's jobs, not only mine.")
@click.option("-q", "--name", "q", help="Names containing this.")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many (newest first).")
@command
def ls(state: State, states, tier, flavor, everyone, q, limit):
    """List jobs: mine by default, newest first."""
    jobs = state.client().list(state=states, tier=tier, flavor=flavor, mine=not everyone, q=q, limit=limit)
    emit(state, jobs, print_table)


def print_teams(teams: list[dict]) -> None:
    """The teams, one line per team and flavor: its split and its members (team admins marked *)."""
    if not teams:
        click.echo("no teams")
        return
    header = ("DEPARTMENT", "TEAM", "FLAVOR", "NOMINAL", "BORROW", "LEND", "MEMBERS")
    table = []
    for t in teams:
        members = ", ".join(m["user"] + ("*" if m["team_admin"] else "") for m in t["members"]) or "-"
        for q in t["quotas"] or [{"flavor": "-", "nominal": "-", "borrowing_limit": "-", "lending_limit": "-"}]:
            table.append((t["department"], t["slug"], q["flavor"], str(q["nominal"]),
                          "any" if q["borrowing_limit"] is None else str(q["borrowing_limit"]),
                          "all" if q["lending_limit"] is None else str(q["lending_limit"]), members))
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for r in [header, *table]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


@cli.command("teams")
@command
def teams(state: State):
    """The teams you see: each one's split of its department's quota, and its members (* a team admin)."""
    emit(state, state.client().teams(), print_teams)


def print_queue(rows: list[dict]) -> None:
    """The whole queue, like ``squeue``: another department's jobs show as their department and size."""
    header = ("FLAVOR", "POS", "DEPARTMENT", "JOB", "TIER", "GPUS", "WAITING", "STARTS", "REASON")
    table = [(r["flavor"], str(r["position"]), r["department"],
              f"{r['id']} {r['name']} ({r['owner']})" if r.get("own") else "-", r["tier"], str(r["gpus"]),
              f"{r['waiting_s'] // 60} min", when(r.get("estimated_start")), r["reason"]) for r in rows]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for r in [header, *table]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if not rows:
        click.echo("nothing is queued")


@cli.command("queue")
@click.option("--flavor", help="Only this GPU type's queue.")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=500, show_default=True, help="At most this many.")
@command
def queue(state: State, flavor, limit):
    """The whole queue, every department's, in the scheduler's order."""
    emit(state, state.client().queue(flavor=flavor, limit=limit), print_queue)


@cli.command()
@click.argument("job_id", type=click.IntRange(min=1))
@command
def get(state: State, job_id):
    """A job's state, why it waits, and its timeline."""
    emit(state, state.client().get(job_id), print_job)


@cli.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--tail", type=click.IntRange(1, 5000), default=200, show_default=True)
@click.option("--pod", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which pod of a multi-node job, by index (0 is rank 0); with --role, its rank in the role.")
@click.option("--role", help="A job of roles: the role whose pod to print (e.g. data).")
@command
def logs(state: State, job_id, follow, tail, pod, role):
    """A job's log (its current attempt's pod 0, or the one --pod and --role name)."""
    for line in state.client().logs(job_id, follow=follow, tail=tail, pod=pod, role=role):
        click.echo(json.dumps(line) if state.json else line)


@cli.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--timeout", type=click.FloatRange(min=0), help="Give up after this many seconds (exit 8).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between polls.")
@click.option("--progress/--no-progress", default=None, help="A progress line (default: when stderr is a tty).")
@command
def wait(state: State, job_id, timeout, interval, progress):
    """Wait until the job ends; exit 0 if it succeeded, 1 if it failed or was cancelled."""
    _wait(state, job_id, timeout=timeout, interval=interval, progress=progress)


def _wait(state: State, job_id: int, *, timeout, interval, progress) -> None:
    if progress is None:
        progress = sys.stderr.isatty() and not state.json
    if progress:
        try:
            import tqdm  # noqa: F401
        except ImportError:
            progress = False
    quiet = state.json or progress
    job = state.client().wait(job_id, timeout=timeout, poll_interval=interval, progress=progress,
                              on_change=None if quiet else lambda j: click.echo(f"job {j['id']}: {describe_wait(j)}"))
    emit(state, job, lambda j: click.echo(f"job {j['id']} {j['state']}") if progress else None)


@cli.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("-m", "--comment", default="", help="Why (kept in the job's timeline).")
@command
def cancel(state: State, job_id, comment):
    """Cancel a job (yours, or your department's as its admin)."""
    emit(state, state.client().cancel(job_id, comment=comment),
         lambda j: click.echo(f"job {j['id']} {j['state']}"))


@cli.command("open")
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--print-url", is_flag=True, help="Print the one-time URL instead of opening a browser.")
@command
def open_session(state: State, job_id, print_url):
    """Open your running session (notebook) or service in the browser, through the portal."""
    answer = state.client().connect(job_id)
    if print_url or state.json:
        emit(state, answer, lambda a: click.echo(a["url"]))
        return
    if not webbrowser.open(answer["url"]):
        click.echo(answer["url"])


@cli.command("service-key")
@click.argument("job_id", type=click.IntRange(min=1))
@command
def service_key(state: State, job_id):
    """A key for calling a running service of your department at its route (shown once).

    The key alone goes to stdout, for ``KEY=$(gpup service-key 42)``; the route and the expiry to stderr. Call
    the service with ``Authorization: Bearer $KEY``: your API token is no credential at a route."""
    answer = state.client().service_key(job_id)

    def human(a):
        click.echo(a["key"])
        click.echo(f"route {a['route']}, good until {a['expires_at']}; send 'Authorization: Bearer <key>'",
                   err=True)

    emit(state, answer, human)


def _credits(amount: float) -> str:
    """An amount of credits as people write it: "1 credit", "0.5 credits", "12 credits"."""
    return f"{amount:g} credit" + ("" if amount == 1 else "s")


@cli.command()
@click.option("-f", "--file", "path", required=True, help="Job file (YAML or JSON; - for stdin).")
@command
def quote(state: State, path):
    """What a job would cost (worst case) and whether it needs approval, before submitting it."""
    spec = load_jobs(path)
    if isinstance(spec, list):
        fail("quote takes one job; this file holds a list", USAGE)
    q = state.client().quote(spec)

    def human(q):
        click.echo(f"{q['gpus_total']} x {q['flavor']} ({q['tier']}) for at most {q['gpu_hours']:g} GPU-hours "
                   f"at {q['rate']} mcr/GPU-hour: at most {_credits(q['estimated_credits'])}")
        if q["metered"]:
            click.echo(f"available: {_credits(q['available'] / 1000)}"
                       + ("" if q["affordable"] else " (not enough: the job would wait for credits)"))
        else:
            click.echo("your department is not metered")
        click.echo("approval: " + ("needed: " + "; ".join(q["approval_reasons"]) if q["needs_approval"]
                                   else "not needed"))
        if q["free_gpus"] is not None:
            click.echo(f"free now: {q['free_gpus']} GPUs of {q['flavor']}")
        size = q.get("size_range") or {}
        if size:  # a resizable job: what it costs at the size it starts at and grown to its largest
            click.echo(f"sizes {size['min_pods']}..{size['max_pods']} pods: {_credits(size['cost_at_start'] / 1000)} "
                       f"at {size['start_pods']}, {_credits(size['cost_at_largest'] / 1000)} grown to {size['max_pods']} "
                       f"(grown GPUs borrowed, preemptible, at the clearing price: {size['grow_rate']} mcr/GPU-hour "
                       "now); the hold is the worst case")
        if q.get("quota"):
            click.echo(f"quota: {q['quota']['message']}")
        start = q.get("start") or {}
        if start:
            when = "now" if start.get("starts_now") else (start.get("estimated_start") or "unknown")
            click.echo(f"start: {when} ({start.get('message', '')})")
        rec = q.get("recommendation") or {}
        if rec:
            click.echo(f"right-sizing: {rec['text']}")
        if rec.get("fraction"):
            click.echo(f"a fraction fits: {rec['fraction']['text']} (measured by {rec['fraction']['source']})")

    emit(state, q, human)


@cli.command()
@click.argument("name", required=False, default="")
@click.option("--image", default="", help="Container image (its history answers for a name never seen).")
@click.option("--flavor", default=None, help="A flavor that shares its GPUs: which fraction of one would do.")
@click.option("--tier", default=None, help="The tier the fraction is priced at.")
@command
def rightsize(state: State, name, image, flavor, tier):
    """What your similar past jobs used, what to ask for, and the fraction of a GPU that would do."""
    if not name and not image:
        fail("give a job name or --image (or both)", USAGE)
    rec = state.client().recommendation(name, image=image, flavor=flavor, tier=tier)

    def human(rec):
        click.echo(rec["text"])
        if rec.get("fraction"):
            f = rec["fraction"]
            click.echo(f"a fraction fits: {f['text']} (measured by {f['source']}; ask for "
                       + (f"gpu_replicas: {f['gpu_replicas']}" if f.get("gpu_replicas") else
                          f"gpu_memory_gib: {f['gpu_memory_gib']}"
                          + (f", gpu_cores: {f['gpu_cores']}" if f.get("gpu_cores") else "")) + ")")
        elif flavor:
            click.echo(f"no fraction of {flavor} fits (or it does not share its GPUs)")

    emit(state, rec, human)


@cli.command("secrets")
@command
def secrets_list(state: State):
    """Your department's secrets: names and keys (values are never shown)."""

    def human(rows):
        if not rows:
            click.echo("no secrets")
        for r in rows:
            where = f" ({r['reference_name']})" if r.get("reference_name") else ""
            click.echo(f"{r['name']:<20} {r['kind']}{where} {r['purpose']}  keys: {', '.join(r['keys']) or '-'}"
                       f"  updated {when(r.get('updated_at'))}")

    emit(state, state.client().secrets(), human)


@cli.group("secret")
def secret_group():
    """Department secrets (department admins set them)."""


def read_secret_values(items: tuple[str, ...]) -> dict[str, str]:
    """``KEY`` (its value read from stdin: one line per key, hidden when typed at a terminal) or
    ``KEY=env:VARIABLE`` (from the environment). A value on the command line itself is refused: it would show
    in ``ps`` and the shell's history."""
    sources: dict[str, str | None] = {}
    for item in items:  # every argument checked before anything is read
        key, sep, source = item.partition("=")
        if not key:
            fail(f"{item[:1]}...: give KEY or KEY=env:VARIABLE", USAGE)
        if key in sources:
            fail(f"{key} is given twice", USAGE)
        if sep and not source.startswith("env:"):
            fail(f"{key}: values are never given on the command line (ps and the shell history show them); "
                 f"use {key} to read it from stdin, or {key}=env:VARIABLE", USAGE)
        if sep and source[4:] not in os.environ:
            fail(f"{key}: the environment variable {source[4:] or '(empty name)'} is not set", USAGE)
        sources[key] = source[4:] if sep else None
    values: dict[str, str] = {}
    for key, var in sources.items():
        if var is not None:
            values[key] = os.environ[var]
        elif sys.stdin.isatty():
            values[key] = click.prompt(f"value of {key}", hide_input=True, err=True)
        else:
            line = sys.stdin.readline()
            if not line:
                fail(f"{key}: no value on stdin (one line per key)", USAGE)
            values[key] = line.rstrip("\r\n")
    return values


@secret_group.command("set")
@click.argument("name")
@click.argument("items", nargs=-1, required=True, metavar="KEY[=env:VARIABLE]...")
@command
def secret_set(state: State, name, items):
    """Set the values of the department secret NAME: rotates it (an image pull secret's KEY is password), or
    declares it kept by the portal. Values come from stdin (KEY, one line each) or the environment
    (KEY=env:VARIABLE), never from the command line."""
    values = read_secret_values(items)
    secret = state.client().secret_set(name, values)
    emit(state, secret, lambda s: click.echo(f"secret {s['name']}: keys {', '.join(s['keys'])} set "
                                             f"(version {s['version']})"))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the shell completion script: eval "$(gpup completion bash)"."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "gpup", "_GPUP_COMPLETE").source())


for _sweep_command in cli_sweeps.COMMANDS:  # gpup hold, release, depend and array
    cli.add_command(_sweep_command)
for _calendar_command in cli_calendar.COMMANDS:  # gpup bookings, maintenance and calendar
    cli.add_command(_calendar_command)


def main() -> None:
    try:
        cli.main(prog_name="gpup")
    except KeyboardInterrupt:
        click.echo("", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
