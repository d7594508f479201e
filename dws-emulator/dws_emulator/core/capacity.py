"""The emulator's capacity model: accelerator pools with a strict FIFO queue per pool.

The model is pure (no threads, no gRPC) and reads time only through an injectable ``clock``
so it can be unit-tested with a fake clock. Callers serialise access (the server holds a lock).

Vocabulary:

* a **pool** is keyed by ``PoolKey(location, accelerator)``, e.g. ``us-central1/NVIDIA_H100_80GB``
  (GPU pools use ``aiplatform_v1.AcceleratorType`` names; TPU pools use a zone and a TPU type such
  as ``us-west4-a/v5litepod`` and count chips). A pool has a ``total`` and an ``in_use`` count.
* a **holder** is an opaque string id (a CustomJob name today, a TPU queued resource later) that
  needs ``count`` units from exactly one pool *at once* (the whole set or nothing).

Queueing rules (deliberately simple and predictable, so tests can reason about them):

* ``enqueue`` (Flex Start / queued resources) appends to the pool's FIFO queue. ``advance`` starts
  queued holders strictly in arrival order: if the head does not fit, nobody behind it starts,
  even a smaller request that would fit. A big request at the head is therefore never starved
  by a stream of small ones (the price is head-of-line blocking, as with a real reservation).
* a queued holder whose ``max_wait`` elapses before it starts is removed and reported expired;
  ``max_wait=None`` means wait indefinitely.
* ``acquire_now`` (on-demand / STANDARD / SPOT) succeeds only if the set fits *and* nobody is
  queued in that pool: an on-demand request may not jump over queued requests.
* ``release`` frees a holder's units (job finished, failed or was cancelled) or removes it from
  the queue. Lowering ``total`` below ``in_use`` never evicts running holders; it only blocks
  new starts until enough units are released.

Cost: ``advance`` does work in proportion to what changed, not to how many holders wait. Max-wait
deadlines sit in a heap, and only pools whose head or free count changed since the last
``advance`` (a release, a resize, an arrival, an expiry) are looked at; a pool whose head still
does not fit is left alone.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class PoolKey:
    """Identifies a pool: a location (region or zone) and an accelerator type name."""

    location: str
    accelerator: str

    def __str__(self) -> str:
        return f"{self.location}/{self.accelerator}"

    @classmethod
    def parse(cls, text: str) -> PoolKey:
        """Parse ``LOCATION/ACCELERATOR``."""
        location, sep, accelerator = text.strip().partition("/")
        if not sep or not location or not accelerator or "/" in accelerator:
            raise ValueError(f"pool must look like LOCATION/ACCELERATOR, got {text!r}")
        return cls(location, accelerator)


def parse_pool_spec(text: str) -> tuple[PoolKey, int]:
    """Parse ``LOCATION/ACCELERATOR=COUNT`` as used by the CLI."""
    pool, sep, count_text = text.partition("=")
    if not sep:
        raise ValueError(f"capacity must look like LOCATION/ACCELERATOR=COUNT, got {text!r}")
    try:
        count = int(count_text)
    except ValueError:
        raise ValueError(f"capacity count must be an integer, got {count_text!r} in {text!r}") from None
    if count < 0:
        raise ValueError(f"capacity count must be >= 0, got {count} in {text!r}")
    return PoolKey.parse(pool), count


@dataclass
class Demand:
    """A holder's need for ``count`` units of one pool."""

    holder: str
    key: PoolKey
    count: int
    submitted_at: float
    deadline: float | None  # None: wait indefinitely
    started_at: float | None = None


@dataclass
class Pool:
    """One pool's inventory and FIFO queue (of holder ids)."""

    key: PoolKey
    total: int
    in_use: int = 0
    # Insertion-ordered, O(1) removal from anywhere: a cancelled waiter leaves at once.
    queue: OrderedDict[str, None] = field(default_factory=OrderedDict)

    @property
    def free(self) -> int:
        # Negative when the pool was shrunk below what is in use.
        return max(0, self.total - self.in_use)


@dataclass
class AdvanceResult:
    """What changed during one ``advance``: holders that started and holders whose wait expired."""

    started: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


class CapacityModel:
    """Pools of accelerators, a strict FIFO queue per pool, max-wait expiry."""

    def __init__(
        self,
        pools: Mapping[Any, int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._pools: dict[PoolKey, Pool] = {}
        self._demands: dict[str, Demand] = {}
        self._deadlines: list[tuple[float, int, str]] = []  # (deadline, seq, holder), lazily pruned
        self._seq = itertools.count()
        self._dirty: set[PoolKey] = set()  # pools whose head may now start
        for key, total in (pools or {}).items():
            self.set_total(key, total)

    # -- inventory -------------------------------------------------------------------------
    @staticmethod
    def _key(key: PoolKey | str) -> PoolKey:
        return key if isinstance(key, PoolKey) else PoolKey.parse(key)

    def set_total(self, key: PoolKey | str, total: int) -> None:
        """Create a pool or change its size (never evicts running holders)."""
        if total < 0:
            raise ValueError(f"pool size must be >= 0, got {total}")
        pkey = self._key(key)
        pool = self._pools.get(pkey)
        if pool is None:
            self._pools[pkey] = Pool(pkey, total)
        else:
            pool.total = total
        self._dirty.add(pkey)

    def has_pool(self, key: PoolKey | str) -> bool:
        return self._key(key) in self._pools

    def pools(self) -> list[PoolKey]:
        return sorted(self._pools)

    def locations_for(self, accelerator: str) -> list[str]:
        """Locations that have a pool of ``accelerator`` (for error messages)."""
        return sorted(k.location for k in self._pools if k.accelerator == accelerator)

    def pool_usage(self, key: PoolKey | str) -> tuple[int, int]:
        """``(total, in_use)`` of one pool; ``(0, 0)`` for a pool that does not exist."""
        pool = self._pools.get(self._key(key))
        return (0, 0) if pool is None else (pool.total, pool.in_use)

    def inventory(self) -> dict[str, dict[str, int]]:
        """``{"loc/acc": {"total", "in_use", "free", "queued"}}`` sorted by pool."""
        return {
            str(key): {
                "total": pool.total,
                "in_use": pool.in_use,
                "free": pool.free,
                "queued": len(pool.queue),
            }
            for key, pool in sorted(self._pools.items())
        }

    # -- holders ---------------------------------------------------------------------------
    def demand(self, holder: str) -> Demand | None:
        return self._demands.get(holder)

    def is_queued(self, holder: str) -> bool:
        demand = self._demands.get(holder)
        return demand is not None and demand.started_at is None

    def is_holding(self, holder: str) -> bool:
        demand = self._demands.get(holder)
        return demand is not None and demand.started_at is not None

    def queue(self, key: PoolKey | str) -> list[str]:
        return list(self._pools[self._key(key)].queue)

    def _new_demand(self, holder: str, key: PoolKey | str, count: int, max_wait: float | None) -> Demand:
        if holder in self._demands:
            raise ValueError(f"{holder} already has a demand")
        pkey = self._key(key)
        if pkey not in self._pools:
            raise KeyError(f"no pool {pkey}")
        if count <= 0:
            raise ValueError(f"count must be > 0, got {count}")
        now = self._clock()
        deadline = None if max_wait is None else now + max_wait
        return Demand(holder, pkey, count, now, deadline)

    def enqueue(self, holder: str, key: PoolKey | str, count: int, max_wait: float | None = None) -> None:
        """Join the pool's FIFO queue; the holder starts in a later ``advance``."""
        demand = self._new_demand(holder, key, count, max_wait)
        self._demands[holder] = demand
        self._pools[demand.key].queue[holder] = None
        self._dirty.add(demand.key)
        if demand.deadline is not None:
            heapq.heappush(self._deadlines, (demand.deadline, next(self._seq), holder))

    def acquire_now(self, holder: str, key: PoolKey | str, count: int) -> bool:
        """Take the whole set immediately, or return False (stock-out). Never queues."""
        demand = self._new_demand(holder, key, count, None)
        pool = self._pools[demand.key]
        if pool.queue or pool.free < count:
            return False
        pool.in_use += count
        demand.started_at = demand.submitted_at
        self._demands[holder] = demand
        return True

    def release(self, holder: str) -> None:
        """Free a running holder's units or take a waiting holder out of its queue (idempotent)."""
        demand = self._demands.pop(holder, None)
        if demand is None:
            return
        pool = self._pools[demand.key]
        if demand.started_at is None:
            del pool.queue[holder]
        else:
            pool.in_use -= demand.count
        self._dirty.add(demand.key)

    def shrink(self, holder: str, count: int) -> None:
        """Give back ``count`` of a running holder's units (part of its set ended, e.g. some of its
        VMs were deleted); at zero it is released. A waiting or unknown holder is left alone."""
        demand = self._demands.get(holder)
        if demand is None or demand.started_at is None or count <= 0:
            return
        count = min(count, demand.count)
        demand.count -= count
        self._pools[demand.key].in_use -= count
        self._dirty.add(demand.key)
        if demand.count == 0:
            del self._demands[holder]

    def advance(self) -> AdvanceResult:
        """Expire overdue waiters, then start queue heads that fit, per changed pool in FIFO order."""
        now = self._clock()
        result = AdvanceResult()
        # Expiry first: a holder whose deadline has passed does not start at the same instant.
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            deadline, _, holder = heapq.heappop(deadlines)
            demand = self._demands.get(holder)
            if demand is None or demand.started_at is not None or demand.deadline != deadline:
                continue  # started or released since: a stale entry
            del self._pools[demand.key].queue[holder]
            del self._demands[holder]
            self._dirty.add(demand.key)
            result.expired.append(holder)
        dirty, self._dirty = self._dirty, set()
        for key in sorted(dirty):
            pool = self._pools[key]
            while pool.queue:
                demand = self._demands[next(iter(pool.queue))]
                if demand.count > pool.free:
                    break  # strict FIFO: the head blocks everyone behind it
                pool.queue.popitem(last=False)
                pool.in_use += demand.count
                demand.started_at = now
                result.started.append(demand.holder)
        return result

    def holders(self) -> Iterable[Demand]:
        return list(self._demands.values())
