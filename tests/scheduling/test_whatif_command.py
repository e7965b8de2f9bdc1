"""manage.py whatif: the portal's own history replayed under a proposed policy or quota change."""

from __future__ import annotations

import csv
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(lab, submit):
    now = timezone.now()
    for i in range(12):
        user = (lab.alice, lab.bob, lab.vadmin)[i % 3]
        job = submit(user, name=f"h{i}", gpus=1 + i % 4, urgency=("low", "normal", "high", "critical")[i % 4])
        start = now - timedelta(hours=10) + timedelta(minutes=20 * i)
        Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, submitted_at=start - timedelta(minutes=5),
                                              started_at=start, finished_at=start + timedelta(minutes=45))


def test_export_writes_the_trace_format(history, tmp_path):
    out = tmp_path / "h.csv"
    call_command("whatif", "--export", str(out))
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 12 and rows[0]["submit_time_s"] == "0.0"
    assert {r["department"] for r in rows} == {"vision", "nlp"}
    assert float(rows[0]["duration_s"]) == 45 * 60


def test_export_neutralises_names_a_spreadsheet_would_run(history, lab, tmp_path):
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(pk=lab.bob.pk).update(username="-2+3")
    out = tmp_path / "h.csv"
    call_command("whatif", "--export", str(out))
    rows = list(csv.DictReader(out.open()))
    assert {r["user"] for r in rows} == {"alice", "'-2+3", "vadmin"}
    assert rows[0]["submit_time_s"] == "0.0"  # numbers are not quoted


def test_compare_prints_differences(history, tmp_path, capsys):
    from scheduling.services.policy import current_policy, policy_as_dict

    proposed = policy_as_dict(current_policy()[0])
    proposed["weights"]["critical"]["standard"] = 20.0
    path = tmp_path / "p.json"
    path.write_text(json.dumps(proposed))
    call_command("whatif", "--policy", str(path), "--quota", "nlp:a100-80gb:2:0")
    text = capsys.readouterr().out
    assert "replayed 12 jobs" in text
    for label in ("utilisation", "dept vision", "dept nlp", "Jain"):
        assert label in text


@pytest.mark.parametrize(("args", "message"), [
    (["--quota", "nlp:a100-80gb:x"], "whole numbers"),
    (["--quota", "nlp:h100:2"], "unknown flavor"),
    (["--quota", "nlp"], "DEPT:FLAVOR:NOMINAL"),
    (["--quota", "physics:a100-80gb:2"], "unknown department"),
    (["--quota", "nlp:a100-80gb:2:0:3"], "cannot exceed the nominal"),
    (["--quota", "nlp:a100-80gb:-1"], "cannot be negative"),
    (["--policy", "/nonexistent.json", "--days", "0.0001"], "cannot read"),
    ([], "nothing to compare"),
    (["--days", "0", "--quota", "nlp:a100-80gb:2"], "positive"),
    (["--quota", "nlp:a100-80gb@nowhere:2"], "unknown cluster 'nowhere'"),
    (["--quota", "nlp:h100@default:2"], "unknown flavor 'h100'"),
])
def test_bad_arguments_are_clear_errors(history, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("whatif", *args)


def test_invalid_proposed_policy(history, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"aging_per_minute": -3}))
    with pytest.raises(CommandError, match="aging_per_minute"):
        call_command("whatif", "--policy", str(path))
    path.write_text("{broken")
    with pytest.raises(CommandError, match="cannot read"):
        call_command("whatif", "--policy", str(path))


def test_the_replay_is_capped_to_the_most_recent_jobs(history, capsys):
    call_command("whatif", "--quota", "nlp:a100-80gb:2:0", "--max-jobs", "5")
    assert "replayed 5 jobs of the last 30 days (the most recent 5 of 12: capped)" in capsys.readouterr().out


def test_the_replay_uses_every_cluster_and_each_jobs_own_cluster_labels(history, lab):
    import io

    from scheduling.models import Cluster, Node
    from scheduling.services import whatif
    from simulator.trace import parse_rows, write_csv

    cloud = Cluster.objects.create(name="cloud", backend="simulated", labels={"data": "cloud"}, cost_rank=2)
    Node.objects.create(cluster=cloud, name="c0", flavor=lab.a100, gpus=4)
    pinned = list(Job.objects.order_by("id").values_list("pk", flat=True)[:4])
    Job.objects.filter(pk__in=pinned).update(cluster_selector={"data": "cloud"})

    groups = whatif.node_groups()
    assert {(g["cluster"], g["flavor"]) for g in groups} == {("default", "a100-80gb"), ("cloud", "a100-80gb")}
    assert len({g["name"] for g in groups}) == len(groups)  # unique across clusters, as the simulator needs
    infos = {c.name: c for c in whatif.cluster_infos()}
    assert infos["cloud"].labels == (("data", "cloud"),) and infos["cloud"].cost_rank == 2

    rows = whatif.export_rows(since=timezone.now() - timedelta(days=30))
    by_id = {int(r.job_id): r for r in rows}
    assert all(by_id[pk].cluster_selector == (("data", "cloud"),) for pk in pinned)
    assert {r.cluster_selector for r in rows if int(r.job_id) not in pinned} == {()}
    out = io.StringIO()
    write_csv(rows, out)  # the exported trace keeps them too
    again = parse_rows(io.StringIO(out.getvalue()))
    assert [r.cluster_selector or () for r in again] == [r.cluster_selector for r in rows]

    result = whatif.run_whatif(days=30, quota_changes=[whatif.QuotaChange("nlp", "a100-80gb", 3, None, None)])
    assert result.jobs == 12
    # every job started, the pinned ones on the only cluster their labels allow
    assert result.result["current"]["never_started"] == 0 == result.result["proposed"]["never_started"]


def test_per_cluster_quotas_are_replayed_and_proposed_by_their_flavor_at_cluster_key(history, lab, capsys):
    from quotas.services import rules
    from scheduling.models import Cluster, Node
    from scheduling.services import whatif

    cloud = Cluster.objects.create(name="cloud", backend="simulated", cost_rank=2)
    Node.objects.create(cluster=cloud, name="c0", flavor=lab.a100, gpus=4)
    rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=cloud, nominal=2, borrowing_limit=0,
                       actor=lab.root)
    assert whatif.current_quotas()["nlp"]["a100-80gb@cloud"] == {"nominal": 2, "borrowing_limit": 0,
                                                                 "lending_limit": None}
    # nlp may not use the default cluster at all in the proposal: its jobs replay on the cloud cluster only
    call_command("whatif", "--quota", "nlp:a100-80gb@default:0:0")
    assert "replayed 12 jobs" in capsys.readouterr().out
    result = whatif.run_whatif(days=30, quota_changes=[whatif.quota_change("nlp", "a100-80gb@cloud", 4, 0)])
    assert result.jobs == 12
    assert result.result["current"]["never_started"] == 0 == result.result["proposed"]["never_started"]
    # the keys take effect: with no a100 on either cluster nlp's 4 jobs never start in the proposal
    result = whatif.run_whatif(days=30, quota_changes=[whatif.quota_change("nlp", "a100-80gb@cloud", 0, 0),
                                                       whatif.quota_change("nlp", "a100-80gb@default", 0, 0)])
    assert result.result["current"]["never_started"] == 0
    assert result.result["proposed"]["never_started"] == 4


def test_the_whatif_page_lists_per_cluster_quotas(history, lab):
    from django.test import Client
    from django.urls import reverse

    from quotas.services import rules
    from scheduling.models import Cluster, Node

    cloud = Cluster.objects.create(name="cloud", backend="simulated")
    Node.objects.create(cluster=cloud, name="c0", flavor=lab.a100, gpus=4)
    rules.quota_create(department=lab.nlp, flavor=lab.a100, cluster=cloud, nominal=2, actor=lab.root)
    c = Client()
    c.force_login(lab.root)
    page = c.get(reverse("dashboard:whatif"))
    assert page.status_code == 200
    assert b'name="quota:nlp:a100-80gb@cloud:nominal" value="2"' in page.content
