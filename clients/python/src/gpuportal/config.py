"""Where the portal's URL and the API token come from, in this order:

1. arguments (``Client(url, token)``, ``gpup --url ... --token ...``);
2. the environment: ``GPU_PORTAL_URL`` and ``GPU_PORTAL_TOKEN``;
3. the config file: ``GPU_PORTAL_CONFIG``, else ``$XDG_CONFIG_HOME/gpu-portal/config.toml``
   (``~/.config/gpu-portal/config.toml``), holding ``url = "..."`` and ``token = "..."``.

``gpup login`` writes the file, readable by its owner only (0600): the token is a password.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path

ENV_URL = "GPU_PORTAL_URL"
ENV_TOKEN = "GPU_PORTAL_TOKEN"
ENV_CONFIG = "GPU_PORTAL_CONFIG"


class ConfigError(ValueError):
    """The configuration is missing or unreadable (the message says what to do)."""


def config_path() -> Path:
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpu-portal" / "config.toml"


def read_config(path: Path | None = None) -> dict:
    """The config file's settings ({} when there is none)."""
    path = path or config_path()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc}") from exc
    return {k: v for k, v in data.items() if k in ("url", "token") and isinstance(v, str)}


def resolve(url: str | None = None, token: str | None = None, *, path: Path | None = None) -> tuple[str, str]:
    """(url, token) from the arguments, the environment and the config file, in that order."""
    url = url or os.environ.get(ENV_URL) or None
    token = token or os.environ.get(ENV_TOKEN) or None
    if url is None or token is None:
        stored = read_config(path)
        url = url or stored.get("url")
        token = token or stored.get("token")
    missing = [name for name, value in (("URL", url), ("API token", token)) if not value]
    if missing:
        raise ConfigError(
            f"No portal {' and no '.join(missing)} configured: run `gpup login`, or set {ENV_URL} and "
            f"{ENV_TOKEN} (in Python: Client(url, token)).")
    return url, token


def write_config(url: str, token: str, *, path: Path | None = None) -> Path:
    """Store ``url`` and ``token``, readable by the owner only. The file is created 0600 before anything is
    written to it (never world-readable for a moment) and replaced atomically."""
    import tomli_w  # only the CLI writes the file; tomli-w comes with the [cli] extra

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".toml")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            tomli_w.dump({"url": url, "token": token}, f)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
