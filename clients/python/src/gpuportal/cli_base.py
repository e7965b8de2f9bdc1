"""What every gpup command shares: the exit codes, the run's state (options, the client), errors turned into a
message and an exit code, output as text or JSON, and the job table. gpuportal.cli (the commands) and
gpuportal.cli_sweeps (the sweep commands) both build on it."""

from __future__ import annotations

import functools
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from gpuportal import config, errors
from gpuportal.client import FINAL_STATES, Client

OK, JOB_FAILED, USAGE, NOT_FOUND, AUTH, UNREACHABLE, CONFLICT, RATE_LIMITED, TIMEOUT = range(9)

EXIT_CODES = [
    (errors.WaitTimeout, TIMEOUT),
    (errors.JobError, JOB_FAILED),
    (errors.ValidationError, USAGE),
    (errors.IdempotencyKeyReused, USAGE),
    (errors.NotFound, NOT_FOUND),
    (errors.AuthenticationError, AUTH),
    (errors.PermissionDenied, AUTH),
    (errors.Conflict, CONFLICT),
    (errors.RateLimited, RATE_LIMITED),
    (errors.ServerError, UNREACHABLE),
    (errors.PortalUnreachable, UNREACHABLE),
]


def exit_code_for(exc: errors.PortalError) -> int:
    return next((code for cls, code in EXIT_CODES if isinstance(exc, cls)), UNREACHABLE)


class State:
    def __init__(self, url: str | None, token: str | None, config_file: Path | None, as_json: bool,
                 retries: int = 5):
        self.url, self.token, self.config_file, self.json = url, token, config_file, as_json
        self.retries = retries
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            try:
                self._client = Client.from_env(url=self.url, token=self.token, config_file=self.config_file,
                                               retries=self.retries)
            except config.ConfigError as exc:
                fail(str(exc), AUTH)
        return self._client


    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def fail(message: str, code: int) -> None:
    click.echo(f"gpup: {message}", err=True)
    sys.exit(code)


def emit(state: State, data: Any, human) -> None:
    """``--json``: the data as JSON on stdout; otherwise ``human(data)``."""
    if state.json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)


def command(fn):
    """A subcommand: ``--json`` on it too, and every portal error turned into a message and an exit code."""

    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON on stdout).")
    @click.pass_obj
    @functools.wraps(fn)
    def wrapper(state: State, *args, as_json: bool = False, **kwargs):
        state.json = state.json or as_json
        try:
            return fn(state, *args, **kwargs)
        except errors.PortalError as exc:
            if state.json:
                click.echo(json.dumps({"error": {"code": exc.code, "message": exc.message, "fields": exc.fields,
                                                 "status": exc.status, **({"job": exc.job} if isinstance(
                                                     exc, errors.JobError) else {})}}, indent=2, default=str))
            click.echo(f"gpup: {exc}", err=True)
            sys.exit(exit_code_for(exc))

    return wrapper


def when(value: str | None) -> str:
    """An API time (ISO 8601, UTC) in the terminal's local time."""
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return value


def print_table(jobs: list[dict]) -> None:
    if not jobs:
        click.echo("no jobs")
        return
    header = ("ID", "NAME", "STATE", "REASON", "GPUS", "TIER", "OWNER", "TEAM", "SUBMITTED")
    rows = [(str(j["id"]), j["name"], j["state"],
             (j.get("reason") or {}).get("code") or "" if j["state"] not in FINAL_STATES else "",
             f"{gpus_text(j)} {j['flavor']}", j["tier"], j["owner"], j.get("team") or "-",
             when(j.get("submitted_at")))
            for j in jobs]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def fraction_text(job: dict) -> str:
    """A pod's GPUs as ``gpup get`` shows them: "2" whole GPUs, or its fraction of one, "0.25 GPU (20 GiB)"
    (docs/fractions.md)."""
    frac = job.get("fraction")
    if not frac:
        return str(job["gpus"])
    if frac.get("gpu_replicas"):
        n = frac['gpu_replicas']
        what = f"{n} replica{'s' if n != 1 else ''}"
    else:
        what = f"{frac.get('gpu_memory_gib'):g} GiB" + (f", {frac['gpu_cores']}% compute" if frac.get("gpu_cores") else "")
    return f"{frac['share']:g} GPU ({what})"


def gpus_text(job: dict) -> str:
    """All of a job's GPUs as ``gpup list`` shows them: whole GPUs, or its pods' shares added up ("0.25")."""
    frac = job.get("fraction")
    if frac:
        return f"{job['pods'] * frac['share']:g}"
    return str(job["pods"] * job["gpus"])
