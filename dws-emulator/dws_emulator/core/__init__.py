"""The emulator's shared core, which imports no API package.

:mod:`.capacity` (pools per location and accelerator type, strict FIFO), :mod:`.clock` (time
conversions and the tick's :class:`~.clock.Schedule`), :mod:`.state` (:class:`~.state.CoreState`:
lock, tick, ids, operations), :mod:`.api` (:class:`~.api.Api`, what an API registers),
:mod:`.errors`, :mod:`.workload` (the run-time / exit-code convention), :mod:`.filters` (AIP-160
list filters), :mod:`.faults`, :mod:`.stats`, :mod:`.wire` (gRPC plumbing), :mod:`.operations`,
:mod:`.control_service` and :mod:`.server` (:class:`~.server.ServerCore`, the process bootstrap).
"""
