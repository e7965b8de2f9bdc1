"""The admission cycle's wall and decide times became histograms: their count is now the +Inf bucket, no
longer the ``portal_cycles_total`` row. Carry that count over so ``_count`` continues where it was (the
``_sum`` rows keep their names) and a rate over the upgrade sees no reset."""

from django.db import migrations

CYCLES = "portal_cycles_total"
HISTOGRAMS = ("portal_cycle_duration_seconds", "portal_cycle_decide_seconds")


def carry_over(apps, schema_editor):
    MetricValue = apps.get_model("portal", "MetricValue")
    old = MetricValue.objects.filter(name=CYCLES, labels="").first()
    if old is None:
        return
    for name in HISTOGRAMS:
        MetricValue.objects.update_or_create(name=f"{name}_bucket", labels="le=+Inf", defaults={"value": old.value})
    MetricValue.objects.filter(name=CYCLES).delete()


def carry_back(apps, schema_editor):
    MetricValue = apps.get_model("portal", "MetricValue")
    count = MetricValue.objects.filter(name=f"{HISTOGRAMS[0]}_bucket", labels="le=+Inf").first()
    if count is not None:
        MetricValue.objects.update_or_create(name=CYCLES, labels="", defaults={"value": count.value})
    MetricValue.objects.filter(name__in=[f"{n}_bucket" for n in HISTOGRAMS]).delete()


class Migration(migrations.Migration):
    dependencies = [("portal", "0004_sso_group_mapping")]

    operations = [migrations.RunPython(carry_over, carry_back)]
