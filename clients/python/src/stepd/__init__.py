"""Python client of stepd, the debugging daemon.

    import stepd
    with stepd.Client() as client:          # $STEPD_ADDR or 127.0.0.1:7701
        print(client.ping().version)

Generated messages and stubs live in ``stepd.v1`` (e.g. ``stepd.v1.event_pb2``);
the API's enums by name in :mod:`stepd.enums`;
errors in :mod:`stepd.errors`; ``launch``/``attach`` return a :class:`stepd.Session`; the asyncio client is :class:`stepd.aio.Client`;
instrumented programs use :mod:`stepd.probe` (``stepd.probe.connect(...)``).
"""

from stepd import enums, errors, probe
from stepd._baggage import SessionBaggage, mint_baggage
from stepd._build import command, debug_input
from stepd._named import NamedEnum
from stepd._pauses import Pauses
from stepd._subscription import Subscription
from stepd.client import Client
from stepd.session import Session
from stepd.views import Pause, State
from stepd.errors import StepdError
from stepd.probe import Skipped, Stopped

__all__ = [
    "Client",
    "NamedEnum",
    "Pause",
    "Pauses",
    "Session",
    "SessionBaggage",
    "State",
    "Skipped",
    "StepdError",
    "Stopped",
    "Subscription",
    "command",
    "debug_input",
    "enums",
    "errors",
    "mint_baggage",
    "probe",
    "__version__",
]

__version__ = "0.1.0"
