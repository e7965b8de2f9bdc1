from django.core.management.base import BaseCommand

from portal.installation import installation_id


class Command(BaseCommand):
    help = ("Print this installation's identity: the value of the gpu-portal.io/installation label on every "
            "object it writes to its clusters (PORTAL_INSTALLATION_ID, else the one kept in the database).")

    def handle(self, *args, **options):
        self.stdout.write(installation_id())
