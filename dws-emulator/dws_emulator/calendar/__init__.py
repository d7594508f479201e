"""Compute Engine calendar mode on the shared core: future reservations, calendar-mode advice and the
reservations they deliver, served on the REST front under ``compute.v1`` like :mod:`..compute`.

Routes (:mod:`.routes`, paths as the ``compute_v1`` REST transports send them):

* ``futureReservations`` (zonal): insert (``requestId`` replayed within 60 minutes: the same
  operation, no second request; a duplicate name is 409 ``alreadyExists``), get, list (pages,
  ``maxResults``/``pageToken``; ``filter`` on ``name``, ``status.procurementStatus``,
  ``planningStatus``, ``reservationMode``), ``aggregated/futureReservations``, cancel, delete;
* ``advice/calendarMode`` (regional): recommendations from the calendar of free capacity
  (:mod:`.advice`, :mod:`.inventory`);
* ``reservations`` (zonal): get, list, ``aggregated/reservations``, delete: the delivered ones.

Mutating calls return zone ``Operation`` resources, polled through the zone operations routes of
:mod:`..compute` (the store is the core's, :mod:`..core.gce_operations`).

Procurement, on the emulator's clock (:class:`~.records.CalendarSettings`: approval delay, minimum
lead time, provisioning delay; ``serve`` options and ``DWS_EMULATOR_CALENDAR_*``):

* insert with ``planningStatus`` SUBMITTED: PENDING_APPROVAL (DRAFT, or unset: DRAFTING, which
  stays so; there is no update route);
* after the approval delay: APPROVED if the calendar has room in the zone on every day of the block
  (it is booked, and its reservation is declared with no capacity yet, so a consumer may queue on
  it), else DECLINED; with approval "manual", only the control calls decide. Still pending at its
  start time: DECLINED. The reason of a decline is in the control record (the API has no field
  for it);
* at ``status.lockTime`` (the documented cancel window: start - 30 days, or 24 hours after the
  approval if the start is at least 4 days away; at once otherwise): PROCURING;
* at the start time: PROVISIONING, and after the provisioning delay FULFILLED with
  ``status.fulfilledCount`` and ``status.autoCreatedReservations`` (full reservation URLs); the
  reservation (``reservationName``, or ``<namePrefix>-<YYYYMMDD>-<NNNN>``) is READY with the block's
  capacity: a pool of its own (:mod:`..core.reservations`), separate from the Flex Start pools. A
  partial delivery (control) ends FAILED_PARTIALLY_FULFILLED, or FAILED when nothing is delivered;
* at the end time (or control ``EndFutureReservation``): the reservation is deleted and every
  consumer of it ended by its API; the request keeps its status.

Cancel: DRAFTING, PENDING_APPROVAL, or APPROVED before the lock time (else 412 ``conditionNotMet``).
Delete: DRAFTING, CANCELLED, DECLINED, FAILED, and any request whose block has ended; else 412
(cancel first, or wait for the end). A delivered block (FULFILLED, FAILED_PARTIALLY_FULFILLED) is
not deleted before its end, nor is its reservation: the documents describe deleting a calendar
request after a cancel or after its end time, and changing an auto-created reservation only after
its end time. Not verified against the live API: the exact lock-time arithmetic, the wording of
the refusals, that a request still pending at its start is DECLINED, and each consumer API's error
when its reservation ends (the shapes above are modelled on each API's documented errors).

What a consumer's API does when its reservation ends (the message always says that the
reservation ``projects/P/zones/Z/reservations/R`` ended, or will not be delivered): a Vertex AI
job FAILED (``error.code`` 14 UNAVAILABLE after it started, 8 RESOURCE_EXHAUSTED before); a TPU
queued resource SUSPENDING -> SUSPENDED with its nodes PREEMPTED (the message in each node's
``healthDescription``) once ACTIVE, FAILED (``failedData.error``) before; a Batch job FAILED (a
status event); a MIG's VMs deleted, its resize request left SUCCEEDED and silent (a final state
has no ``lastAttempt``), or FAILED while it still waited (``status.error``, code
``RESOURCE_NOT_FOUND``: Google documents no code for this, see ``compute/reserved.py``).

This module stays light (names only): the fault rules and counters use :data:`CALENDAR_METHODS`.
"""

#: The REST service these methods are registered and counted under (shared with Compute Engine).
COMPUTE_SERVICE = "compute.v1"
#: Every emulated method, by its Discovery id.
CALENDAR_METHODS = (
    "compute.futureReservations.insert",
    "compute.futureReservations.get",
    "compute.futureReservations.list",
    "compute.futureReservations.aggregatedList",
    "compute.futureReservations.cancel",
    "compute.futureReservations.delete",
    "compute.advice.calendarMode",
    "compute.reservations.get",
    "compute.reservations.list",
    "compute.reservations.aggregatedList",
    "compute.reservations.delete",
)
