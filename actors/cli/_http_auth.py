"""Who may use ``trio-recall mcp --http``: the loopback rule (README "MCP server").

Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address: ``localhost``, or an IP address in
    127.0.0.0/8 or ``::1`` (IPv4-mapped ones included). Other names are not resolved,
    and count as not loopback: what DNS says cannot turn the token requirement off."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
