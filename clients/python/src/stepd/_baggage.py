"""A W3C baggage entry that marks one person's requests in a shared mesh.

Send it in a ``baggage`` header and scope probe breakpoints to it
(``client.add_breakpoint(probe_kind="tool_call", baggage=entry)``): only the
requests that carry it hold. The same as ``stepctl baggage mint``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

#: The key :func:`mint_baggage` uses when given none.
DEFAULT_KEY = "debug-session"


@dataclass(frozen=True)
class SessionBaggage:
    """One baggage entry, ``key=value``."""

    key: str
    value: str

    def __str__(self) -> str:
        """The entry as a ``baggage`` header value."""
        return f"{self.key}={self.value}"

    @property
    def header(self) -> str:
        """The header line to send, e.g. ``baggage: debug-session=…``."""
        return f"baggage: {self}"


def mint_baggage(key: str = DEFAULT_KEY) -> SessionBaggage:
    """A fresh entry under `key` with a random value (64 bits as 16 hex digits)."""
    return SessionBaggage(key, secrets.token_hex(8))
