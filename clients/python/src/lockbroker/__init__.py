"""lockbroker: named locks from a lockbroker broker, for threads (Client)
and asyncio (AsyncClient).

    import lockbroker

    with lockbroker.Client("127.0.0.1:7711") as client:
        with client.lock("orders:42", timeout=5) as hold:
            write_order(42, fencing_token=hold.token)
"""

from .aio import AsyncClient, AsyncHold, AsyncWatch, LockContext
from ._common import ConnectionEvent
from .client import Client, Hold, LockRequest, Watch
from .counters import CounterEvent, Counters
from .errors import (BadArgument, BadCommand, BrokerError, Closed,
                     ConnectError, Denied, LimitExceeded, LineTooLong,
                     LockBrokerError, LockBusy, LockLost, LockTimeout,
                     NoSession, NotAcquired, NotAuthenticated, NotHeld,
                     ProtocolError, SessionLost, Unavailable, UsageError,
                     VersionError, WaitCancelled)
from .protocol import CheckResult, KeyState

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncHold", "AsyncWatch", "LockContext", "Client", "Hold",
    "LockRequest", "Watch", "ConnectionEvent", "KeyState", "CheckResult",
    "Counters", "CounterEvent", "Closed",
    "LockBrokerError", "BrokerError", "BadCommand", "BadArgument",
    "LineTooLong", "NotAuthenticated", "NotHeld", "LockLost", "Unavailable",
    "LimitExceeded", "NoSession", "Denied", "NotAcquired", "LockBusy",
    "LockTimeout", "WaitCancelled", "UsageError", "ConnectError",
    "VersionError", "SessionLost", "ProtocolError",
]
