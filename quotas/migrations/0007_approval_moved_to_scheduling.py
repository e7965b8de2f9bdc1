# The job-approval decision moved to scheduling (scheduling.models.Approval), where its use case is. Only the
# migration state moves: the table keeps its name (quotas_approval) and its rows, scheduling's 0007 takes it
# over in the state.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0006_quota_request_cluster'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='Approval')],
            database_operations=[],
        ),
    ]
