"""Re-encrypt every stored secret with the first of FIELD_ENCRYPTION_KEYS (after a new key was put first), so
that the old keys can be dropped. Values no configured key decrypts are listed and left as they are."""

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
        if unreadable:
            raise CommandError(
                f"{len(unreadable)} webhook secret(s) cannot be read with FIELD_ENCRYPTION_KEYS (webhooks "
                f"{', '.join(map(str, unreadable))}): add the key they were encrypted with, or rotate their "
                "secrets in the portal"
            )
