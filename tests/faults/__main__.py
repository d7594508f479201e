"""``python -m tests.faults [--executor local|celery|both] [--only NAME[,NAME]] [--ci] [--keep] [--list]``.

Runs the fault matrix on each chosen executor (``both``, the default: LocalExecutor, then
CeleryExecutor, each in a deployment of its own), prints one table per executor, and exits 1 if
any scenario FAILed (2 if a deployment could not start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.faults import matrix
from tests.faults.harness import HarnessError, compile_bytecode

#: The repository's trees Airflow processes import from (the rest is the virtualenv's).
ROOT = Path(__file__).resolve().parents[2]
SOURCE_TREES = [
    ROOT / p
    for p in ("airflow_provider_dws", "dws-emulator/dws_emulator", "example_dags", "tests/faults/dags")
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="NAME[,NAME]", help="run only these scenarios")
    parser.add_argument("--ci", action="store_true", help="run the CI-sized subset (what make test runs)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (Airflow and emulator logs)"
    )
    parser.add_argument(
        "--executor",
        choices=["local", "celery", "both"],
        default="both",
        help="LocalExecutor, CeleryExecutor (Redis broker, separate workers) or both, one after the other",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    if args.list:
        for s in matrix.SCENARIOS:
            only = len(s.executors) == 1
            flags = ", ".join(
                f for f, on in (("ci", s.ci), ("shared", s.shared), (f"{s.executors[0]} only", only)) if on
            )
            print(f"{s.name:32} {s.title}" + (f" [{flags}]" if flags else ""))
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    executors = ["local", "celery"] if args.executor == "both" else [args.executor]
    if names:
        executors = [e for e in executors if matrix.select(names, args.ci, e)] or executors
    # Once, before any deployment: every process then finds compiled bytecode, as a user's does.
    print(f"bytecode compiled in {compile_bytecode(*SOURCE_TREES):.0f}s", flush=True)
    reports, passed = [], True
    for executor in executors:
        try:
            rows, report = matrix.run(names, ci=args.ci, keep=args.keep, executor=executor)
        except (ValueError, HarnessError) as err:
            print(f"fault matrix ({executor}): {err}", file=sys.stderr)
            return 2
        print(report, flush=True)
        reports.append(report)
        passed = passed and all(r.passed for r in rows)
    if len(reports) > 1:  # both tables again at the end, where they are read
        print("\n\n".join(["", *reports]))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
