"""Why a driver stops driving a session."""


class SessionError(RuntimeError):
    """The session cannot go on; the message says why and is recorded as `SessionFailed`."""


class LostClaim(RuntimeError):
    """Another orchestrator drives this session now."""


class PNodeFailure(RuntimeError):
    """PNodes of the plan went silent (or stopped answering): recover by reallocating."""

    def __init__(self, pnodes: list[str], reason: str) -> None:
        super().__init__(reason)
        self.pnodes = pnodes


class DriverDone(Exception):
    """The driver recorded why it stops (paused for capacity) and ends without failing the session."""


class Quarantine(Exception):
    """Spot checks caught PNodes computing wrong results: quarantine them and roll back past their work."""

    def __init__(self, pnodes: list[str], step: int, reason: str) -> None:
        super().__init__(reason)
        self.pnodes = pnodes
        self.step = step
