from django.core.management.base import BaseCommand, CommandError

from scheduling.backends.base import BackendError
from scheduling.services.podsets import ensure_priority_classes


class Command(BaseCommand):
    help = "Create or update the tier PriorityClasses (ai-realtime, ai-elastic, ai-backfill) in every cluster."

    def handle(self, *args, **options):
        try:
            changed = ensure_priority_classes()
        except BackendError as exc:
            raise CommandError(str(exc))
        self.stdout.write("changed: " + (", ".join(changed) if changed else "nothing (already up to date)"))
