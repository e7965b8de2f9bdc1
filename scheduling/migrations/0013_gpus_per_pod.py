# The code's names say which GPUs they mean: a job's ``gpus`` (per pod) is ``gpus_per_pod`` and a namespace quota
# refusal's ``gpus`` (all the refused pods) is ``total_gpus``. State only: both columns keep the name ``gpus``
# (``db_column``), and the job's check constraint is the same SQL on the same column.

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0012_job_secrets'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name='job', name='job_gpus_positive'),
                migrations.RenameField(model_name='job', old_name='gpus', new_name='gpus_per_pod'),
                migrations.AlterField(
                    model_name='job',
                    name='gpus_per_pod',
                    field=models.PositiveIntegerField(db_column='gpus', help_text='GPUs per pod',
                                                      validators=[django.core.validators.MinValueValidator(1)]),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('gpus_per_pod__gte', 1), ('pods__gte', 1)),
                                                      name='job_gpus_positive'),
                ),
                migrations.RenameField(model_name='namespacequotarefusal', old_name='gpus', new_name='total_gpus'),
                migrations.AlterField(
                    model_name='namespacequotarefusal',
                    name='total_gpus',
                    field=models.PositiveIntegerField(db_column='gpus',
                                                      help_text='the GPUs of the refused request (all its pods)'),
                ),
            ],
        ),
    ]
