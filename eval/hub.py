"""Is the Hugging Face hub reachable? (so offline runs fail at once instead of retrying for minutes)."""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlparse

#: environment variables that put the hub libraries offline
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=None)
def _unreachable(host: str, port: int, timeout: float) -> str | None:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as e:
        return f"{host}:{port} is not reachable ({e.strerror or type(e).__name__})"


def offline_reason(timeout: float = 3.0) -> str | None:
    """Why the hub cannot be used now (an offline variable is set, or its host does not answer), else ``None``."""
    for var in OFFLINE_VARS:
        if _truthy(os.environ.get(var)):
            return f"{var}={os.environ[var]} is set (offline mode)"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return _unreachable(url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443), timeout)
