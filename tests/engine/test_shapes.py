"""Jobs of any shape in the engine (``engine.shapes``): CPU-only jobs on CPU pools, jobs of several roles admitted
all or nothing, quotas in cores and memory that add the roles up, and reasons that name the role."""

from __future__ import annotations

from core_builders import NOW

from engine import schedule
from engine.shapes import resource_key
from engine.types import Node, PendingJob, Quota, Role, RunningJob, Snapshot

GiB = 1024


def cpu_node(name: str, cores: int = 16, gib: int = 64, cluster: str = "default", **kw) -> Node:
    return Node(name=name, flavor="cpu", gpus=0, kind="cpu", cpu_m=cores * 1000, memory_mib=gib * GiB,
                cluster=cluster, **kw)


def gpu_node(name: str, gpus: int = 8, cluster: str = "default") -> Node:
    return Node(name=name, flavor="a100", gpus=gpus, cluster=cluster)


def cpu_role(name: str = "main", pods: int = 1, cores: float = 2, gib: int = 8) -> Role:
    return Role(name, pods, 0, int(cores * 1000), gib * GiB, "cpu")


def gpu_role(name: str = "train", pods: int = 2, gpus: int = 4) -> Role:
    return Role(name, pods, gpus, 8000, 64 * GiB, "a100")


def cpu_job(id: int, *roles: Role, dept: str = "A", **kw) -> PendingJob:
    kw.setdefault("submitted_at", NOW - 1000 + id)  # lower ids first
    return PendingJob(id=id, department=dept, flavor="cpu", pods=0, gpus_per_pod=0, roles=roles or (cpu_role(),),
                      **kw)


def mixed_job(id: int, *roles: Role, dept: str = "A", **kw) -> PendingJob:
    kw.setdefault("submitted_at", NOW - 1000 + id)  # lower ids first
    gpu = [r for r in roles if r.gpus_per_pod]
    return PendingJob(id=id, department=dept, flavor="a100", pods=sum(r.pods for r in gpu),
                      gpus_per_pod=gpu[0].gpus_per_pod, roles=roles, **kw)


def quotas(dept: str = "A", gpus: int = 16, cores: int = 64, gib: int | None = None) -> tuple[Quota, ...]:
    out = [Quota(dept, "a100", gpus, 0), Quota(dept, resource_key("cpu", "cpu"), cores * 1000, 0)]
    if gib is not None:
        out.append(Quota(dept, resource_key("cpu", "memory"), gib * GiB, 0))
    return tuple(out)


def snap(nodes, pending, quota=None, running=()) -> Snapshot:
    return Snapshot(now=NOW, nodes=tuple(nodes), pending=tuple(pending), running=tuple(running),
                    quotas=quota if quota is not None else quotas())


def test_cpu_only_job_runs_on_the_cpu_pool_never_on_a_gpu_node():
    result = schedule(snap([gpu_node("g0"), cpu_node("c0")], [cpu_job(1, cpu_role(pods=2))]))
    (adm,) = result.admissions
    assert adm.placement == ("c0", "c0")
    assert result.figures.get("admitted_gpus", 0) == 0


def test_cpu_only_job_without_a_cpu_pool_waits_and_leaves_the_gpu_nodes_alone():
    result = schedule(snap([gpu_node("g0")], [cpu_job(1)]))
    assert not result.admissions
    assert result.pending[0].code == "unknown_flavor"


def test_cpu_pods_are_placed_best_fit_on_cores_and_memory():
    # c0 has 4 cores free, c1 16: a 4-core pod fills c0 first and keeps the whole node free.
    running = RunningJob(id=9, department="A", flavor="cpu", tier="elastic", placement=(), gpus_per_pod=0,
                         started_at=NOW - 60, cpu_pods=(("cpu", "c0", 12000, 8 * GiB),))
    result = schedule(snap([cpu_node("c0"), cpu_node("c1")], [cpu_job(1, cpu_role(cores=4))], running=[running]))
    assert result.admissions[0].placement == ("c0",)


def test_a_role_over_every_node_names_the_role_and_never_fits():
    result = schedule(snap([cpu_node("c0", cores=8)], [cpu_job(1, cpu_role("big", cores=12))]))
    reason = result.pending[0]
    assert reason.code == "exceeds_capacity"
    assert reason.detail["role"] == "big"
    assert "role big" in reason.message


def test_running_cpu_pods_hold_their_cores():
    running = RunningJob(id=9, department="A", flavor="cpu", tier="elastic", placement=(), gpus_per_pod=0,
                         started_at=NOW - 60, cpu_pods=(("cpu", "c0", 16000, 8 * GiB),))
    result = schedule(snap([cpu_node("c0")], [cpu_job(1)], running=[running]))
    assert not result.admissions
    assert result.pending[0].code == "no_capacity"
    assert result.pending[0].detail["free_cpu_millicores"] == 0


def test_two_roles_are_admitted_together_role_by_role():
    job = mixed_job(1, gpu_role(pods=2, gpus=4), cpu_role("data", pods=4, cores=4))
    result = schedule(snap([gpu_node("g0"), gpu_node("g1"), cpu_node("c0")], [job]))
    (adm,) = result.admissions
    assert adm.placement[:2] in (("g0", "g0"), ("g0", "g1"), ("g1", "g1"))
    assert adm.placement[2:] == ("c0",) * 4
    assert result.figures["admitted_gpus"] == 8


def test_all_or_nothing_a_data_role_that_does_not_fit_keeps_the_trainers_out():
    job = mixed_job(1, gpu_role(pods=1, gpus=4), cpu_role("data", pods=5, cores=4))  # 20 cores, the pool has 16
    after = mixed_job(2, gpu_role(pods=1, gpus=8))  # the GPUs were not taken by the job that waits
    result = schedule(snap([gpu_node("g0"), cpu_node("c0")], [job, after]))
    assert [a.job_id for a in result.admissions] == [2]
    reason = next(p for p in result.pending if p.job_id == 1)
    assert reason.code == "no_capacity" and reason.detail["role"] == "data"


def test_cpu_quota_adds_the_roles_up():
    # Two roles of 8 cores each: 16 cores in all, the department may use 12.
    job = cpu_job(1, cpu_role("a", pods=2, cores=4), cpu_role("b", pods=1, cores=8))
    result = schedule(snap([cpu_node("c0", cores=32)], [job], quota=quotas(cores=12)))
    assert not result.admissions
    reason = result.pending[0]
    assert reason.code == "quota_exhausted"
    assert reason.detail["resource"] == "cpu" and reason.detail["roles"] == ["a", "b"]


def test_memory_quota_applies_only_where_a_row_says_so():
    job = cpu_job(1, cpu_role(pods=2, gib=16))  # 32 GiB
    assert schedule(snap([cpu_node("c0")], [job], quota=quotas(gib=None))).admissions
    result = schedule(snap([cpu_node("c0")], [job], quota=quotas(gib=24)))
    assert not result.admissions and result.pending[0].detail["resource"] == "memory"


def test_a_department_without_a_cpu_quota_cannot_use_the_pool():
    result = schedule(snap([cpu_node("c0")], [cpu_job(1, dept="B")]))
    assert result.pending[0].code == "quota_exhausted"


def test_running_cpu_work_counts_in_the_quota():
    running = RunningJob(id=9, department="A", flavor="cpu", tier="elastic", placement=(), gpus_per_pod=0,
                         started_at=NOW - 60, cpu_pods=(("cpu", "c9", 10000, GiB),))
    result = schedule(snap([cpu_node("c0")], [cpu_job(1, cpu_role(cores=4))], quota=quotas(cores=12), running=[running]))
    assert result.pending[0].code == "quota_exhausted"


def test_cpu_jobs_fill_the_pool_in_queue_order_then_wait():
    jobs = [cpu_job(i, cpu_role(cores=6)) for i in range(1, 5)]  # two fit a 16-core node (12), the third not
    result = schedule(snap([cpu_node("c0")], jobs))
    assert sorted(a.job_id for a in result.admissions) == [1, 2]
    assert {p.job_id: p.code for p in result.pending} == {3: "no_capacity", 4: "no_capacity"}


def test_cpu_only_jobs_take_nothing_from_gpu_jobs():
    gpu_only = PendingJob(id=5, department="A", flavor="a100", pods=1, gpus_per_pod=8, submitted_at=NOW)
    result = schedule(snap([gpu_node("g0"), cpu_node("c0")], [cpu_job(1), gpu_only]))
    assert sorted(a.job_id for a in result.admissions) == [1, 5]


def test_cpu_roles_go_to_the_gpu_roles_cluster():
    # The GPUs are on "east", the only CPU pool with room on "west": the job waits rather than splitting.
    nodes = [gpu_node("g0", cluster="east"), cpu_node("c0", cluster="east", cores=2), cpu_node("c1", cluster="west")]
    job = mixed_job(1, gpu_role(pods=1, gpus=4), cpu_role("data", pods=1, cores=4))
    result = schedule(snap(nodes, [job]))
    assert not result.admissions
    assert result.pending[0].detail["role"] == "data"
    nodes.append(gpu_node("g1", cluster="west"))
    (adm,) = schedule(snap(nodes, [job])).admissions
    assert adm.cluster == "west" and adm.placement == ("g1", "c1")


def test_the_decision_does_not_depend_on_input_order():
    nodes = [cpu_node(f"c{i}", cores=8) for i in range(3)]
    jobs = [cpu_job(i, cpu_role(pods=2, cores=3)) for i in range(1, 6)]
    one = schedule(snap(nodes, jobs))
    two = schedule(snap(list(reversed(nodes)), list(reversed(jobs))))
    assert one.admissions == two.admissions
