"""Cloud TPU ``google.cloud.tpu.v2.Tpu`` queued resources and nodes on the shared core.

:mod:`.validation` holds the chip arithmetic and CreateQueuedResource checks, :mod:`.state` the
life cycle (:class:`~.state.TpuState`), :mod:`.service` the gRPC servicer.
"""

from .validation import both_tiers_on_wire, parse_accelerator_type

TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
METHODS = (
    "CreateQueuedResource",
    "GetQueuedResource",
    "ListQueuedResources",
    "DeleteQueuedResource",
    "GetNode",
    "ListNodes",
)

__all__ = ["METHODS", "TPU_SERVICE", "both_tiers_on_wire", "parse_accelerator_type"]
