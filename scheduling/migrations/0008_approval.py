# The job-approval decision, moved here from quotas with its use case (scheduling.services.job_approvals). State
# only: the table quotas_approval and its rows stay as they are (quotas' 0007 let go of it in the state).

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0007_namespace_quota_refusal'),
        ('quotas', '0007_approval_moved_to_scheduling'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Approval',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('decision', models.CharField(choices=[('approved', 'Approved'), ('rejected', 'Rejected')], max_length=10)),
                        ('comment', models.TextField(blank=True)),
                        ('reason', models.CharField(blank=True, help_text='why approval was required', max_length=300)),
                        ('decided_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('actor', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='approval', to='scheduling.job')),
                    ],
                    options={
                        'db_table': 'quotas_approval',
                        'ordering': ['-decided_at', '-id'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('decision__in', ['approved', 'rejected'])), name='approval_valid')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
