"""``manage.py lab apply FILE [--dry-run] [--prune] [--actor USER]`` and ``manage.py lab export [-o FILE]``."""

from __future__ import annotations

import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab


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
        e = sub.add_parser("export", help="Write the current lab in the same format.")
        e.add_argument("-o", "--output", help="write to this file instead of standard output")

    def handle(self, *args, verb, **opts):
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
                raise CommandError(f"--actor {opts['actor']}: no such platform admin.")
        path = opts["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.")
        try:
            result = apply_lab(text, actor=actor, dry_run=opts["dry_run"], prune=opts["prune"])
        except LabFileInvalid as exc:
            self.stderr.write(f"{path}: refused, nothing was changed ({len(exc.errors)} error(s)):")
            for err in exc.errors:
                self.stderr.write(f"  {err}")
            raise CommandError(f"{path} is invalid: {len(exc.errors)} error(s).")
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
