"""The cluster page's picture: every GPU of every node, who holds it, what is free; job details only for
jobs the viewer may see, and the fragmentation figure explained."""

from __future__ import annotations

import re

import pytest

from scheduling.models import Job, JobState, Node
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


def _cells(html):
    return re.findall(r'class="gpu ([^"]*)" data-kind="(\w+)"(?: data-department="(\w+)")?(?: data-job="(\d+)")?', html)


def test_every_gpu_is_drawn_with_its_holder_and_other_departments_jobs_stay_anonymous(
        lab, submit, go, client, django_assert_max_num_queries):
    Node.objects.filter(name="n1").update(used_by_others=1)
    mine = submit(lab.alice, gpus=2)
    theirs = submit(lab.bob, gpus=3)
    go(run_cycle)
    admitted = {j.pk for j in Job.objects.filter(state=JobState.ADMITTED)}
    assert {mine.pk, theirs.pk} <= admitted
    client.force_login(lab.alice)
    with django_assert_max_num_queries(12):
        html = client.get("/cluster/").content.decode()
    cells = _cells(html)
    assert len(cells) == 8  # two nodes of four
    kinds = [k for _, k, _, _ in cells]
    assert kinds.count("job") == 5 and kinds.count("other") == 1 and kinds.count("free") == 2
    assert {(d, j) for _, k, d, j in cells if k == "job"} == {("vision", str(mine.pk)), ("nlp", "")}
    assert f'href="/jobs/{mine.pk}/"' in html and f"/jobs/{theirs.pk}/" not in html
    assert "fragmentation-help" in html and "partly used nodes" in html
    assert "/n0</td>" not in html and 'data-node="n0"' not in html  # node names are for platform admins
    client.force_login(lab.root)
    html = client.get("/cluster/").content.decode()
    assert f'href="/jobs/{theirs.pk}/"' in html and 'data-node="n0"' in html


def test_a_cordoned_node_draws_no_free_gpu(lab, client):
    Node.objects.filter(name="n0").update(schedulable=False)
    client.force_login(lab.alice)
    kinds = [k for _, k, _, _ in _cells(client.get("/cluster/").content.decode())]
    assert kinds.count("cordoned") == 4 and kinds.count("free") == 4
