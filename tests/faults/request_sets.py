"""Requests the provider makes as one that the emulator records as several: a set of standalone
flex-start VMs (one ``Instance`` record per VM) and a Job's flex-start nodes (one ``FlexStartNode``
record per node), each made one record of the request the matrix counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def instance_sets(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with each set of standalone flex-start VMs (the emulator's ``Instance`` records
    of one ``dws_vms`` label) made one request, as the provider sees it: ``PENDING`` while any VM
    waits, ``RUNNING`` once all ran, then ``RELEASED`` (deleted after all ran) or ``DELETED``
    (deleted before: given up, marked failed, incomplete)."""
    out: list[dict[str, Any]] = []
    sets: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        name = r["labels"].get("dws_vms") if r["kind"] == "Instance" else None
        if name:
            sets.setdefault((r["project"], r["location"], name), []).append(r)
        else:
            out.append(r)
    for (project, zone, name), vms in sets.items():
        size = int(vms[0]["labels"].get("dws_vms_size") or len(vms))
        starts = [v["start_time"] for v in vms if v["start_time"]]
        ran = len(starts) == size
        deleted = all(v["deleted"] for v in vms)
        state = ("RELEASED" if ran else "DELETED") if deleted else "RUNNING" if ran else "PENDING"
        created = min(v["create_time"] for v in vms)
        history = [{"state": "PENDING", "time": created}]
        if ran:
            history.append({"state": "RUNNING", "time": max(starts)})
        if deleted:
            history.append({"state": "DELETED", "time": max(v["end_time"] for v in vms)})
        out.append(
            {
                "kind": "InstanceSet",
                "name": f"projects/{project}/zones/{zone}/instances/{name}",
                "display_name": name,
                "labels": vms[0]["labels"],
                "state": state,
                "deleted": deleted,
                "create_time": created,
                "history": history,
            }
        )
    return out


#: The label Kubernetes puts on a Job's pods (so on the flex-start nodes the emulator records for them).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def flex_job_sets(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with the flex-start nodes of each Job (the emulator's ``FlexStartNode`` records
    of the pods of one Job: one identity, try and attempt) made one request, as the provider sees
    it: ``WAITING`` while a node is still asked for, ``RUNNING`` while its pods run on nodes that
    came up, then ``RELEASED`` (its pods ran and ended; an empty node left for the autoscaler to
    scale down is not the Job's) or ``DELETED`` (no node came up: given up, marked failed)."""
    out: list[dict[str, Any]] = []
    jobs: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        labels = r["labels"]
        if r["kind"] == "FlexStartNode" and labels.get("dws_key"):
            key = (
                labels["dws_key"],
                labels.get("dws_try", ""),
                labels.get("dws_attempt", ""),
                r["namespace"],
            )
            jobs.setdefault(key, []).append(r)
        else:
            out.append(r)
    for nodes in jobs.values():
        waiting = any(n["state"] == "WAITING" for n in nodes)
        running = any(n["active_pods"] for n in nodes)
        ran = any(n["start_time"] and n["pods"] for n in nodes)
        state = "WAITING" if waiting else "RUNNING" if running else "RELEASED" if ran else "DELETED"
        created = min(n["create_time"] for n in nodes)
        history = [{"state": "WAITING", "time": created}]
        starts = [n["start_time"] for n in nodes if n["start_time"]]
        if starts:
            history.append({"state": "RUNNING", "time": max(starts)})
        if state in ("RELEASED", "DELETED"):
            ends = [n["end_time"] for n in nodes if n["end_time"]] or [max(starts or [created])]
            history.append({"state": state, "time": max(ends)})
        name = str(nodes[0]["labels"].get(JOB_NAME_LABEL) or nodes[0]["display_name"])
        out.append(
            {
                "kind": "FlexStartJob",
                "name": f"{nodes[0]['namespace']}/{name}",
                "display_name": name,
                "labels": nodes[0]["labels"],
                "state": state,
                "deleted": state in ("RELEASED", "DELETED"),
                "create_time": created,
                "history": history,
            }
        )
    return out
