"""CPU and memory of processes, read from ``/proc`` (Linux only)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcessGone(RuntimeError):
    """A process the benchmark needs is not there."""


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None  # exited while we looked
    # The command name may hold spaces and parentheses: fields start after the last ")".
    return text[text.rindex(")") + 2 :].split()


def _proc_table() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, CPU seconds of itself and its reaped children)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is None:
            continue
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        table[int(entry.name)] = (int(fields[1]), ticks / CLK_TCK)
    return table


def _children(table: Mapping[int, tuple[int, float]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    return children


def _tree(root: int, table: Mapping[int, tuple[int, float]]) -> list[int]:
    children = _children(table)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            found.append(pid)
            todo.extend(children.get(pid, ()))
    return found


def tree_cpu(roots: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each root's process tree, processes that already ended included.

    A live process counts its own time plus that of its reaped children; a child still running
    counts itself, so nothing is counted twice.
    """
    table = _proc_table()
    return {root: sum(table[pid][1] for pid in _tree(root, table)) for root in roots}


def process_cpu(pid: int) -> float:
    """CPU seconds of one process (with its reaped children), 0 if it is gone."""
    return _proc_table().get(pid, (0, 0.0))[1]


def children_cpu(parent: int) -> float:
    """CPU seconds of everything under ``parent``, not ``parent`` itself.

    For the scheduler under LocalExecutor: its worker processes, each a task's supervisor, and the
    task processes they fork, live or ended (a reaped worker's time is in the scheduler's cutime
    and cstime, a reaped task process's in its worker's).
    """
    table = _proc_table()
    fields = _stat_fields(parent)
    if fields is None:
        raise ProcessGone(f"process {parent} is gone")
    reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK  # cutime, cstime
    under = [pid for pid in _tree(parent, table) if pid != parent]
    return reaped + sum(table[pid][1] for pid in under)


def rss_mib(pid: int) -> float:
    """Resident memory of one process, MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def trigger_runner(triggerer_pid: int) -> int:
    """The trigger runner: the child process of ``airflow triggerer`` that runs the event loop."""
    table = _proc_table()
    children = [pid for pid, (ppid, _) in table.items() if ppid == triggerer_pid]
    if not children:
        raise ProcessGone(f"the triggerer (pid {triggerer_pid}) has no trigger runner process")
    # Only one child is expected; should Airflow add a helper, the runner is the biggest.
    return max(children, key=rss_mib)
