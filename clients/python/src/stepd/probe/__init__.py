"""Probes: an instrumented program marks its own pause points.

    import stepd

    probe = stepd.probe.connect(name="agent", labels={"agent": "main"})
    with probe.scope("turn"):
        args = probe.hold("tool_call", name="Bash", value=args, editable=True)
        probe.observe("web_source", "search", {"url": url})

A point holds only when the daemon armed it (a probe breakpoint matches, step
mode after NEXT, a Pause request, …). The decision is local — from the last
``Armed`` the daemon pushed — so **a point that does not hold costs no network
round trip** (well under 2 µs). A point that holds waits until a client
answers its pause: ``hold`` returns the original value (CONTINUE, NEXT, …) or
the injected one (INJECT), raises :class:`stepd.Skipped` (SKIP) or
:class:`stepd.Stopped` (QUIT). ``docs/probes.md`` is the contract.

Threads and asyncio: a background thread owns the gRPC stream and reconnects
with backoff (while disconnected, points don't hold; a hold in progress when
the stream drops keeps waiting and is re-reported to the daemon the probe
reconnects to, within ``reconnect_deadline`` and the hold limit, unless
``release_on_disconnect=True`` lets it go on at once). Each hold waits on
its own queue, so other threads keep running and may hold too. In coroutines
use ``await probe.ahold(...)``, ``async with probe.scope(...)`` and decorate
``async def`` functions: the wait never blocks the event loop. Scopes nest per
thread and per asyncio task (a context variable).

Security note: EVAL runs client-supplied Python with ``eval``/``exec`` in the
frame that called ``hold`` (its globals and a copy of its locals, plus ``_``
bound to the held value). Anyone who can answer pauses on the daemon can run
code in the program — exactly like an attached debugger. The daemon listens on
loopback and a user-only Unix socket by default; pass ``eval=False`` to
:func:`connect` to refuse evaluation (EVAL then disappears from the pause's
``input_type``).
"""

from stepd.probe._condition import ConditionError, compile_condition, evaluate
from stepd.probe._glob import compile_glob
from stepd.probe._probe import Probe, Skipped, Stopped, connect

__all__ = [
    "ConditionError",
    "Probe",
    "Skipped",
    "Stopped",
    "compile_condition",
    "compile_glob",
    "connect",
    "evaluate",
]
