"""Notice before preemption on the Kubernetes backend, against the fake API server: the pods of a job that asked
for notice carry a downward-API volume showing the notice annotation (admitted in a namespace that enforces the
restricted Pod Security profile) and the variables to answer with; ``notify`` sets the annotation with a JSON
patch of the metadata only (the spec's immutability rules are not in play), skipping pods that are gone."""

from __future__ import annotations

from scheduling.backends.base import NOTICE_ANNOTATION, NOTICE_DIR, NOTICE_FILE


def _notice_podset(make_podset):
    return make_podset(notice_s=120, notice_answer_url="https://portal.test/api/v1/jobs/42/checkpoint-written",
                       notice_token="gpn_42_1_" + "a" * 64)


def test_the_pods_show_the_notice_annotation_as_a_file_under_the_restricted_profile(kube_backend, kube_fake,
                                                                                       make_podset):
    kube_backend.ensure_pods(_notice_podset(make_podset))  # team-a enforces PodSecurity restricted
    (pod,) = [p for (ns, _), p in kube_fake.pods.items() if ns == "team-a"]
    spec = pod["spec"]
    volume = next(v for v in spec["volumes"] if "downwardAPI" in v)
    (item,) = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{NOTICE_ANNOTATION}']"
    assert f"{NOTICE_DIR}/{item['path']}" == NOTICE_FILE
    container = spec["containers"][0]
    assert {"name": volume["name"], "mountPath": NOTICE_DIR, "readOnly": True} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PORTAL_NOTICE_FILE"] == NOTICE_FILE and env["PORTAL_NOTICE_S"] == "120"
    assert env["PORTAL_NOTICE_ANSWER_URL"].endswith("/jobs/42/checkpoint-written")
    assert env["PORTAL_JOB_TOKEN"].startswith("gpn_42_1_")


def test_a_job_without_notice_gets_neither_volume_nor_variables(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset())
    (pod,) = [p for (ns, _), p in kube_fake.pods.items() if ns == "team-a"]
    assert not any("downwardAPI" in v for v in pod["spec"].get("volumes") or [])
    assert not any(e["name"].startswith("PORTAL_NOTICE") for e in pod["spec"]["containers"][0]["env"])


def test_notify_patches_the_annotation_and_nothing_else(kube_backend, kube_fake, make_podset):
    podset = _notice_podset(make_podset)
    kube_backend.ensure_pods(podset)
    (key,) = [k for k in kube_fake.pods if k[0] == "team-a"]
    before = kube_fake.pods[key]
    spec_before, version = dict(before["spec"]), before["metadata"]["resourceVersion"]
    told = kube_backend.notify(job_id=42, attempt=1, namespace="team-a",
                               annotations={NOTICE_ANNOTATION: '{"evict_at": "2026-12-01T12:02:00+00:00"}'})
    assert told == (key[1],)
    after = kube_fake.pods[key]
    assert after["metadata"]["annotations"][NOTICE_ANNOTATION] == '{"evict_at": "2026-12-01T12:02:00+00:00"}'
    assert after["metadata"]["annotations"]["user-tier"] == "pi"  # the others kept
    assert after["spec"] == spec_before and after["metadata"]["resourceVersion"] != version
    # another attempt's pods are not told, and a pod gone meanwhile is skipped
    assert kube_backend.notify(job_id=42, attempt=2, namespace="team-a", annotations={NOTICE_ANNOTATION: "x"}) == ()
