"""gpup's sweep commands: ``submit --array``, ``hold``, ``release``, ``array show|tasks|cancel`` and
``depend`` (docs/sweeps.md). ``gpuportal.cli`` adds ``COMMANDS`` to ``gpup`` and calls ``submit_array``."""

from __future__ import annotations

import click

from gpuportal.cli_base import USAGE, State, command, emit, fail, print_table


def print_array(a: dict) -> None:
    counts = ", ".join(f"{n} {state}" for state, n in a["counts"].items() if n) or "no tasks"
    throttle = f", at most {a['throttle']} at once" if a.get("throttle") else ""
    click.echo(f"array a{a['id']} {a['name']}: {a['size']} tasks ({a['indices']}{throttle})")
    click.echo(f"  {counts}")


def submit_array(state: State, spec: dict, *, array: str, template, overrides: dict, key) -> None:
    client = state.client()
    body = {**spec, **overrides}
    if template is not None:  # the template's spec with the file's and --set's fields on top
        body = {**client.template(template)["spec"], **body}
    emit(state, client.submit_array(body, array=array, idempotency_key=key), print_array)


def _ref(value: str) -> str:
    if not (value.isdigit() or (value[:1] in "aA" and value[1:].isdigit())):
        fail(f"{value!r}: a job id (12) or an array (a7)", USAGE)
    return value


@click.command()
@click.argument("target")
@command
def hold(state: State, target):
    """Hold a waiting job (12) or every waiting task of an array (a7): it keeps its place, is not admitted."""
    emit(state, state.client().hold(_ref(target)), _held)


@click.command()
@click.argument("target")
@command
def release(state: State, target):
    """Release a held job (12) or array (a7)."""
    emit(state, state.client().release(_ref(target)), _held)


def _held(obj: dict) -> None:
    if "counts" in obj:
        print_array(obj)
    else:
        click.echo(f"job {obj['id']} {obj['state']}{' (held)' if obj.get('held') else ''}: "
                   f"{(obj.get('reason') or {}).get('message', '')}")


@click.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.argument("after")
@command
def depend(state: State, job_id, after):
    """Replace what a waiting job waits for: gpup depend 12 afterok:10,afterany:a7 ("" for nothing)."""
    job = state.client().set_dependencies(job_id, after)
    emit(state, job, lambda j: click.echo(f"job {j['id']} waits for {j['after'] or 'nothing'}"))


@click.group()
def array():
    """Job arrays: show one, list its tasks, cancel it."""


@array.command("show")
@click.argument("array_id")
@command
def array_show(state: State, array_id):
    """An array's tasks counted by state."""
    emit(state, state.client().array(_ref(array_id)), print_array)


@array.command("tasks")
@click.argument("array_id")
@command
def array_tasks(state: State, array_id):
    """The array's tasks, in index order."""
    emit(state, state.client().array_tasks(_ref(array_id)), print_table)


@array.command("cancel")
@click.argument("array_id")
@click.option("--waiting", is_flag=True, help="Only the tasks that have not started.")
@click.option("-m", "--comment", default="", help="Why (kept in each task's timeline).")
@command
def array_cancel(state: State, array_id, waiting, comment):
    """Cancel an array's tasks (all that have not ended, or only the waiting ones)."""
    emit(state, state.client().array_cancel(_ref(array_id), waiting_only=waiting, comment=comment), print_array)


COMMANDS = [hold, release, depend, array]
