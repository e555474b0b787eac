"""Each user's commands through a token bucket: a burst, then the rate; one recorded refusal per burst."""

from computeall.orchestrator.command_rate import CommandRate, Take


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_and_one_recorded_refusal_per_burst():
    clock = Clock()
    rate = CommandRate(per_second=5, burst=10, clock=clock)
    assert [rate.take("alice") for _ in range(10)] == [Take.TAKEN] * 10
    flood = [rate.take("alice") for _ in range(1000)]
    assert flood[0] is Take.REFUSED_FIRST and set(flood[1:]) == {Take.REFUSED}
    assert rate.take("bob") is Take.TAKEN, "each user has their own bucket"
    clock.now += 1.0  # five more tokens: taken, and the flood goes on without a new record
    assert [rate.take("alice") for _ in range(6)] == [Take.TAKEN] * 5 + [Take.REFUSED]
    clock.now += 0.25  # still in the same burst (the bucket never filled up again)
    assert [rate.take("alice") for _ in range(2)] == [Take.TAKEN, Take.REFUSED]
    clock.now += 10 / 5  # quiet for as long as the bucket takes to fill: the burst is over
    assert [rate.take("alice") for _ in range(11)] == [Take.TAKEN] * 10 + [Take.REFUSED_FIRST]


def test_the_refusal_says_the_limit_and_what_to_do():
    reason = CommandRate(per_second=5, burst=60).describe("alice")
    assert "user alice sends commands faster than 5 per second (60 at once)" in reason
    assert "wait 12s" in reason
