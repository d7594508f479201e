"""``python -m tests.faults [--only NAME[,NAME]] [--ci] [--keep] [--list]``: run the fault matrix.

Prints one row per scenario and exits 1 if any scenario FAILed (2 if the deployment could not
start).
"""

from __future__ import annotations

import argparse
import sys

from tests.faults import matrix
from tests.faults.harness import HarnessError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="NAME[,NAME]", help="run only these scenarios")
    parser.add_argument("--ci", action="store_true", help="run the CI-sized subset (what make test runs)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (Airflow and emulator logs)"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    if args.list:
        for s in matrix.SCENARIOS:
            flags = ", ".join(f for f, on in (("ci", s.ci), ("shared", s.shared)) if on)
            print(f"{s.name:32} {s.title}" + (f" [{flags}]" if flags else ""))
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    try:
        rows, report = matrix.run(names, ci=args.ci, keep=args.keep)
    except (ValueError, HarnessError) as err:
        print(f"fault matrix: {err}", file=sys.stderr)
        return 2
    print(report)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
