"""Seed N jobs (default 100,000) with their departments, users, timelines and ledger rows, to load the pages at
scale (docs/operations.md, Benchmarks)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from lab.scale import RealUsersPresent, seed_scale


class Command(BaseCommand):
    help = ("Top the configured database up to N seeded jobs (default 100,000) in plausible states, with extra "
            "departments, users, job timelines and ledger rows, written in bulk. Refuses a database holding "
            "accounts it did not make (other than the demo's) unless --force.")

    def add_arguments(self, parser):
        parser.add_argument("--jobs", type=int, default=100_000, help="seeded jobs wanted in total")
        parser.add_argument("--departments", type=int, default=12, help="extra departments")
        parser.add_argument("--users", type=int, default=300, help="extra users, spread over the departments")
        parser.add_argument("--batch", type=int, default=5000, help="jobs written per transaction")
        parser.add_argument("--force", action="store_true",
                            help="seed even though the database holds real users' accounts")

    def handle(self, *args, jobs, departments, users, batch, force, **opts):
        if jobs < 0 or departments < 0 or users < 1 or batch < 1:
            raise CommandError("--jobs and --departments must be >= 0, --users and --batch >= 1.")
        started = time.monotonic()
        try:
            made = seed_scale(jobs=jobs, departments=departments, users=users, batch=batch, force=force)
        except RealUsersPresent as exc:
            raise CommandError(
                f"This database has users this command did not make ({', '.join(exc.args[0])}...): seeding "
                "would mix fake jobs and ledger rows into a real lab's history. Point DATABASE_URL at a scratch "
                "database, or pass --force if you mean it.") from exc
        self.stdout.write(self.style.SUCCESS(
            f"Seeded {made.jobs} jobs, {made.events} events, {made.ledger} ledger rows "
            f"({made.departments} departments, {made.users} members) in {time.monotonic() - started:.0f} s."))
