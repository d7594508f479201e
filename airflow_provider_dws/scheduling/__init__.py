"""Pure scheduling decisions shared by every DWS operator and trigger.

Nothing here performs I/O or imports Airflow or Google client libraries: every function is a
value-in, value-out decision that can be tested without a server. Import from the modules
themselves (``scheduling.policies``, ``scheduling.decisions``, ``scheduling.phases``, ...); this
package re-exports nothing, so that importing one of them does not import them all.
"""
