"""What to try next when a job fails: the one table that the job's page (``observability.services.hints``) and the
notification of the failure (``scheduling.services.notify``) both read, so that they never say different things.

A failure is looked up by its reason (the pod's, as the kubelet reports it, or the portal's own), then by its
exit code; a reason of its own wins over the exit code (an ``OOMKilled`` pod also exits 137), and a plain
``Error`` falls back to the exit code, then to the generic advice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailureHint:
    code: str  # stable, machine-readable: the page's ``data-hint`` and the API's hint code
    title: str
    advice: str


GENERIC = FailureHint("failed_with_error", "The command exited with an error",
                      "The command exited with an error: read the job's logs (gpup logs <id>) for the traceback.")

_IMAGE = "The image could not be pulled"
BY_REASON: dict[str, FailureHint] = {
    "OOMKilled": FailureHint("oom_killed", "Killed for running out of memory",
                             "The container ran out of memory: ask for more memory (memory_mib) or lower the batch "
                             "size."),
    "ImagePullBackOff": FailureHint("image_pull", _IMAGE,
                                    "The image could not be pulled: check its name and tag, and that the registry is "
                                    "reachable and accepts the cluster's credentials."),
    "ErrImagePull": FailureHint("image_pull", _IMAGE, "The image could not be pulled: check its name and tag and the "
                                "registry's credentials."),
    "InvalidImageName": FailureHint("image_pull", _IMAGE, "The image name is not valid: use registry/name:tag."),
    "ErrImageNeverPull": FailureHint("image_pull", _IMAGE, "The image is not on the node and may not be pulled: use "
                                     "an image the cluster can pull."),
    "CreateContainerConfigError": FailureHint("container_config", "The container could not be configured",
                                              "The container could not be configured: check its environment and "
                                              "command."),
    "InvalidPodSpec": FailureHint("invalid_pod_spec", "The cluster refused the job's pods",
                                  "The cluster refused the job's pods: check the image, the command and the "
                                  "resources."),
    "DeadlineExceeded": FailureHint("deadline_exceeded", "Stopped at its maximum run time",
                                    "The job ran past its max_runtime_s: raise it, or checkpoint and resume."),
    "Error": GENERIC,
}

BY_EXIT_CODE: dict[int, FailureHint] = {
    137: FailureHint("killed", "Killed (exit code 137)",
                     "Exit code 137 is a kill (SIGKILL): out of memory, or stopped before it finished terminating; "
                     "raise memory or termination_grace_s."),
    139: FailureHint("segfault", "Crashed (exit code 139)",
                     "Exit code 139 is a segmentation fault: check native extensions and CUDA/driver versions."),
    143: FailureHint("terminated", "Terminated (exit code 143)",
                     "Exit code 143 is a termination (SIGTERM): the job was stopped; checkpoint so it can resume."),
}


def failure_hint(reason: str, exit_code: int | None) -> FailureHint:
    """The advice for a failure with this reason code and exit code (see the module's order)."""
    own = BY_REASON.get(reason)
    if own is not None and own is not GENERIC:
        return own
    return BY_EXIT_CODE.get(exit_code, GENERIC) if exit_code is not None else GENERIC


def reasons_of(code: str) -> frozenset[str]:
    """The failure reasons whose hint has this code (e.g. every reason an image cannot be pulled for)."""
    return frozenset(r for r, h in BY_REASON.items() if h.code == code)
