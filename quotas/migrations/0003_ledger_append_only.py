"""The ledger is append-only in the database itself (PostgreSQL): an UPDATE or DELETE of a ledger entry or a
refill record raises, whoever issues it (ORM bulk operations, a shell, another service).

The trigger function ``portal_forbid_change()`` is created by scheduling 0002."""

from django.db import migrations

TABLES = ("quotas_ledgerentry", "quotas_refillrecord")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION portal_forbid_change();"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")


class Migration(migrations.Migration):
    dependencies = [("quotas", "0002_budgets"), ("scheduling", "0002_append_only_triggers")]
    operations = [migrations.RunPython(forwards, backwards)]
