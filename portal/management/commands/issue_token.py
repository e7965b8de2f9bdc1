"""Issue an API token for a user from the command line (operators, CI, a newcomer trying the API)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.models import ApiToken


class Command(BaseCommand):
    help = "Print a new API token for USERNAME (shown once; only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a label for the token")
        parser.add_argument("--days", type=int, default=None, help="lifetime in days (default API_TOKEN_TTL_DAYS)")

    def handle(self, *args, username, name, days, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {username!r}")
        if days is not None and not 1 <= days <= 365:
            raise CommandError("--days must be between 1 and 365")
        if not name.strip() or len(name) > 80:
            raise CommandError("--name must be 1 to 80 characters")
        token, secret = ApiToken.issue(user=user, name=name, ttl_days=days)
        self.stdout.write(secret)
        self.stderr.write(f"token {token.key_id} for {username}, expires {token.expires_at:%Y-%m-%d}")
