from django.core.management.base import BaseCommand

from portal import config


class Command(BaseCommand):
    help = "Print the effective configuration read from the environment (secrets masked)."

    def handle(self, *args, **options):
        for name, value, help_text in config.describe(config.load()):
            self.stdout.write(f"{name:<26} {value:<40} {help_text}")
