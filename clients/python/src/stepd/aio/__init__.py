"""asyncio variant of the stepd client (``grpc.aio``).

    import stepd.aio
    async with stepd.aio.Client() as client:
        print((await client.ping()).version)
        async with client.events() as events:
            async for event in events:
                ...
"""

from stepd.aio._pauses import AsyncPauses
from stepd.aio._subscription import AsyncSubscription
from stepd.aio.client import Client
from stepd.aio.session import AsyncSession

__all__ = ["AsyncPauses", "AsyncSession", "AsyncSubscription", "Client"]
