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


class Unanswered(PNodeFailure):
    """PNodes that heartbeat but left a request unanswered long past what its kind takes (`stalls.py`):
    treated as lost, as silent ones are; this incarnation of each gets no more work."""


class StepStalled(PNodeFailure):
    """Requests to PNodes went unanswered after a connection to the bus was lost and made again (their
    messages, core NATS, at most once, were lost with a nats-server), or every PNode answered and some
    gave up waiting for inputs that never came: no PNode is at fault. A step's RunStep is run again in
    place (`TrainingStep`); anything else recovers as from a lost PNode, losing none."""

    def __init__(self, reason: str) -> None:
        super().__init__([], reason)


class DriverDone(Exception):
    """The driver recorded why it stops (paused for capacity) and ends without failing the session."""


class Quarantine(Exception):
    """Spot checks caught PNodes computing wrong results: quarantine them and roll back past their work."""

    def __init__(self, pnodes: list[str], step: int, reason: str) -> None:
        super().__init__(reason)
        self.pnodes = pnodes
        self.step = step
