"""The store's named leases held for a block (`Leases.holding`): refused while another owner holds
the lease, given back however the block ends."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from agent_memory.errors import ConflictError
from agent_memory.models import utcnow
from agent_memory.settings import Settings
from storage import open_store
from storage.connect import maintenance_of
from storage.leases import Leases

pytestmark = pytest.mark.store  # a LanceDB on a temporary directory
TTL = timedelta(minutes=5)


@pytest.fixture
def leases(settings: Settings) -> Leases:
    return maintenance_of(open_store(settings, embedding_model="all-MiniLM-L6-v2", embedding_dim=384)).leases


def test_a_lease_held_for_a_block_goes_back_when_the_block_raises(leases: Leases) -> None:
    now = utcnow()
    released_at: list[datetime] = []

    def clock() -> datetime:
        released_at.append(now + timedelta(seconds=3))
        return released_at[-1]

    with pytest.raises(RuntimeError, match="store gone"), leases.holding("nightly", "run-a", TTL, now, clock=clock):
        assert leases.holder("nightly", now)["owner"] == "run-a"
        raise RuntimeError("store gone")
    assert len(released_at) == 1  # read once, when the lease went back
    assert leases.holder("nightly", now) is None
    with leases.holding("nightly", "run-b", TTL, now, clock=lambda: now):  # free for the next run
        assert leases.holder("nightly", now)["owner"] == "run-b"
    assert leases.holder("nightly", now) is None


def test_a_lease_another_owner_holds_is_refused_and_left_to_it(leases: Leases) -> None:
    now = utcnow()
    assert leases.acquire("nightly", "run-holder", TTL, now)
    entered = False
    with pytest.raises(ConflictError) as err, leases.holding("nightly", "run-late", TTL, now, clock=lambda: now):
        entered = True
    assert not entered
    assert err.value.code == "nightly_running"
    assert str(err.value).startswith("another nightly run (run-holder) holds the lease until ")
    assert leases.holder("nightly", now)["owner"] == "run-holder"
    # Once it has expired, the lease is taken.
    later = now + TTL + timedelta(seconds=1)
    with leases.holding("nightly", "run-late", TTL, later, clock=lambda: later):
        assert leases.holder("nightly", later)["owner"] == "run-late"
