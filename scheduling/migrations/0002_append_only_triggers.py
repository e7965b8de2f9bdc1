"""Make the timeline and the audit log append-only in the database itself (PostgreSQL), not only in Python:
an UPDATE or DELETE raises, whoever issues it (ORM bulk operations, a shell, another service)."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION portal_forbid_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = TG_TABLE_NAME || ' is append-only', ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)
    for table in ("scheduling_jobevent", "portal_auditentry"):
        schema_editor.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION portal_forbid_change();"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in ("scheduling_jobevent", "portal_auditentry"):
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial"), ("portal", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
