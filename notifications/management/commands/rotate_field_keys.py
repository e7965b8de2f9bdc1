"""Re-encrypt every stored secret with the first of FIELD_ENCRYPTION_KEYS (after a new key was put first), so
that the old keys can be dropped. Values no configured key decrypts are listed and left as they are."""

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from notifications.models import Webhook


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args, **options):
        rotated = 0
        unreadable = []
        with transaction.atomic():
            for hook in Webhook.objects.select_for_update().order_by("pk").only("pk", "secret"):
                if not hook.secret:  # the field reads a value no key decrypts as ""
                    unreadable.append(hook.pk)
                    continue
                Webhook.objects.filter(pk=hook.pk).update(secret=hook.secret)  # written with the first key
                rotated += 1
        self.stdout.write(f"re-encrypted {rotated} webhook secret(s) with the first key")
        # Department secrets' values (workloads; by name: notifications imports no app above it).
        secret_model = apps.get_model("workloads", "DepartmentSecret")
        moved, lost = 0, []
        with transaction.atomic():
            for row in secret_model.objects.select_for_update().order_by("pk").only(
                    "pk", "kind", "values_encrypted").filter(kind="value"):
                if not row.values_encrypted:
                    lost.append(row.pk)
                    continue
                secret_model.objects.filter(pk=row.pk).update(values_encrypted=row.values_encrypted)
                moved += 1
        self.stdout.write(f"re-encrypted {moved} department secret(s) with the first key")
        if lost:
            self.stderr.write(
                f"{len(lost)} department secret(s) cannot be read with FIELD_ENCRYPTION_KEYS (ids "
                f"{', '.join(map(str, lost))}): add the key they were encrypted with, or set their values again")
        if unreadable or lost:
            if not unreadable:
                raise CommandError(f"{len(lost)} department secret(s) cannot be read with FIELD_ENCRYPTION_KEYS")
            raise CommandError(
                f"{len(unreadable)} webhook secret(s) cannot be read with FIELD_ENCRYPTION_KEYS (webhooks "
                f"{', '.join(map(str, unreadable))}): add the key they were encrypted with, or rotate their "
                "secrets in the portal"
            )
