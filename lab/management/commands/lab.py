"""``manage.py lab apply FILE [--dry-run] [--prune] [--actor USER] [--migrate]`` and ``manage.py lab export
[-o FILE]``. A refused file or an unmigrated database is one line on standard error and exit code 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from lab.services.shape import max_bytes

BAD_INPUT = 2  # the exit code of every refusal (bad file, bad option, database not ready)


def _refuse(message: str) -> CommandError:
    return CommandError(message, returncode=BAD_INPUT)


def _unapplied_migrations() -> int:
    """How many migrations the database lacks; a fresh install has no tables at all."""
    executor = MigrationExecutor(connection)
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def _read(path: str) -> tuple[bytes, int | None]:
    """The file's first ``max_bytes() + 1`` bytes (enough to refuse a larger one without reading it all) and,
    for a regular file, its whole size."""
    limit = max_bytes() + 1
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(limit) if stream is not None else sys.stdin.read(limit).encode("utf-8", "surrogatepass")
        return data, None
    with open(path, "rb") as fh:
        return fh.read(limit), os.fstat(fh.fileno()).st_size


class Command(BaseCommand):
    help = "Apply a lab file (departments, members, flavors, clusters, quotas, prices, budgets, policy) or export."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        a = sub.add_parser("apply", help="Make the lab match the file (one transaction; nothing on error).")
        a.add_argument("file", help="the lab file (YAML), or - for standard input")
        a.add_argument("--dry-run", action="store_true", help="Print what would change; change nothing.")
        a.add_argument("--prune", action="store_true",
                       help="Also remove what the file does not declare (departments are archived, not deleted).")
        a.add_argument("--actor", help="The platform admin recorded in the audit entries (default: the platform).")
        a.add_argument("--migrate", action="store_true",
                       help="Apply the database's unapplied migrations first (a fresh install has none applied).")
        e = sub.add_parser("export", help="Write the current lab in the same format.")
        e.add_argument("-o", "--output", help="write to this file instead of standard output")

    def handle(self, *args, verb, **opts):
        missing = _unapplied_migrations()
        if missing and opts.get("migrate"):
            call_command("migrate", interactive=False, verbosity=0)
        elif missing:
            raise _refuse(f"the database lacks {missing} migration(s): run `manage.py migrate` first "
                          f"(or pass --migrate to {verb})" if verb == "apply" else
                          f"the database lacks {missing} migration(s): run `manage.py migrate` first")
        if verb == "export":
            text = dump(export_lab())
            if opts.get("output"):
                Path(opts["output"]).write_text(text)
                self.stdout.write(f"Lab written to {opts['output']}.")
            else:
                self.stdout.write(text, ending="")
            return
        actor = None
        if opts.get("actor"):
            actor = get_user_model().objects.filter(username=opts["actor"]).first()
            membership = getattr(actor, "membership", None) if actor else None
            if actor is None or membership is None or not membership.is_platform_admin:
                raise _refuse(f"--actor {opts['actor']}: no such platform admin.")
        path = opts["file"]
        try:
            raw, size = _read(path)
        except OSError as exc:
            raise _refuse(f"Cannot read {path}: {exc.strerror}.")
        try:
            result = apply_lab(raw, actor=actor, dry_run=opts["dry_run"], prune=opts["prune"], size=size)
        except LabFileInvalid as exc:
            if len(exc.errors) == 1:
                raise _refuse(f"{path}: refused, nothing was changed: {exc.errors[0]}")
            self.stderr.write(f"{path}: refused, nothing was changed ({len(exc.errors)} error(s)):")
            for err in exc.errors:
                self.stderr.write(f"  {err}")
            raise _refuse(f"{path} is invalid: {len(exc.errors)} error(s).")
        for line in result.lines:
            self.stdout.write(line)
        summary = f"{result.created} to create, {result.changed} to change, {result.removed} to remove"
        if result.unchanged:
            self.stdout.write(self.style.SUCCESS(f"No changes: the lab already matches {path}."))
        elif opts["dry_run"]:
            self.stdout.write(f"Dry run: {summary}. Nothing was changed.")
        else:
            self.stdout.write(self.style.SUCCESS(
                f"Applied {path}: {result.created} created, {result.changed} changed, {result.removed} removed."))
