"""Check whether this machine can download published weights, before a hub client retries for a minute.

The core's because two extensions fetch from the hub (pretrained's timm/torchvision weights, hf's models)."""

from __future__ import annotations

import socket
from urllib.parse import urlparse


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Tell whether a TCP connection to the URL's host opens; a compute node without a network answers at once."""
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "", parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False
