"""Python client of the GPU portal: ``from gpuportal import Client``.

    client = Client.from_env()            # GPU_PORTAL_URL / GPU_PORTAL_TOKEN, or `gpup login`'s config file
    job = client.submit(name="r50", image="nvcr.io/nvidia/pytorch:24.05-py3", command=["python", "train.py"],
                        flavor="a100-80gb", gpus=2)
    client.wait(job, progress=True)

See docs/client.md in the portal's repository.
"""

from gpuportal.client import FINAL_STATES, JOB_DEFAULTS, Client, describe_wait
from gpuportal.config import ConfigError
from gpuportal.errors import (
    AuthenticationError,
    Conflict,
    IdempotencyKeyReused,
    JobCancelled,
    JobError,
    JobFailed,
    NotFound,
    PermissionDenied,
    PortalError,
    PortalUnreachable,
    RateLimited,
    ServerError,
    ValidationError,
    WaitTimeout,
)

__version__ = "0.1.0"
__all__ = [
    "AuthenticationError", "Client", "ConfigError", "Conflict", "FINAL_STATES", "IdempotencyKeyReused",
    "JOB_DEFAULTS", "JobCancelled", "JobError", "JobFailed", "NotFound", "PermissionDenied", "PortalError",
    "PortalUnreachable", "RateLimited", "ServerError", "ValidationError", "WaitTimeout", "describe_wait",
]
