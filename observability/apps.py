from django.apps import AppConfig

from scheduling import ports


class ObservabilityConfig(AppConfig):
    name = "observability"
    verbose_name = "GPU use, idle GPUs, right-sizing and hints"

    def ready(self):
        # Registered here, once the models are loaded, so every process finds the tasks by name (beat names
        # them) and /metrics includes the scheduler's, the ledger's and the GPU-use series in every process that serves
        # it.
        # (selectors: right-sizing's answers to scheduling's port; it reads models too)
        from observability import checks, selectors, tasks  # noqa: F401 - registers checks and tasks; they import models
        from observability.services import metrics, scheduler_metrics  # read models: once loaded
        from portal.metrics import register_collector  # reads MetricValue: only once the models are loaded

        register_collector(scheduler_metrics.SchedulerCollector())
        register_collector(metrics.GpuUseCollector())
        # Right-sizing answers scheduling's quote and start estimates through its port (scheduling never
        # imports observability).
        ports.register(selectors.RightSizing())
        # The measured use of each attempt answers the ledger's usage report (its efficiency column) the same way.
        from quotas import ports as quota_ports

        quota_ports.register_measured(selectors.MeasuredUse())
