"""Where a burst's event-loop stalls went: read a ``py-spy record --format chrometrace`` profile.

``benchmarks/triggerer_airflow.py --profile DIR`` records the trigger runner (and its supervisor)
with ``--idle --threads`` during each burst. In such a profile the event loop's thread is idle
exactly when its innermost frame is the selector's wait; every other stretch is the loop busy
running callbacks. This prints each busy stretch longer than ``--min-ms`` (the stalls the
watchdog reports, seen from the inside) and, over all of them, where the time went: by the
callback the loop was running (the frame just under ``Handle._run``) and by the innermost
frames, with inclusive time per function.

    .venv/bin/python benchmarks/burst_profile.py DIR/provider-runner.json [--min-ms 20]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

#: Innermost frames of an idle event loop (the selector's wait).
IDLE_LEAVES = ("select", "poll", "epoll", "_poll")
#: Frames of asyncio's own machinery: skipped when naming the callback a stretch ran.
LOOP_FRAMES = ("run_forever", "_run_once", "Handle._run", "run", "Context.run")


def timeline(events: Sequence[dict], thread: str) -> list[tuple[float, float, tuple[str, ...]]]:
    """(start s, end s, stack outermost first) stretches of one thread, from begin/end events."""
    stack: list[str] = []
    out: list[tuple[float, float, tuple[str, ...]]] = []
    tid = next((e["tid"] for e in events if e["name"].endswith(f": {thread}")), None)
    if tid is None:
        raise SystemExit(f"no thread named {thread!r} in the profile")
    last_ts: float | None = None
    for event in sorted((e for e in events if e["tid"] == tid), key=lambda e: e["ts"]):
        ts = event["ts"] / 1e6
        if last_ts is not None and ts > last_ts and stack:
            out.append((last_ts, ts, tuple(stack)))
        last_ts = ts
        name = (
            f"{event['name']} ({Path(event['args'].get('filename') or '').name}:{event['args'].get('line')})"
        )
        if event["ph"] == "B":
            stack.append(name)
        elif stack:
            stack.pop()
    return out


def idle(stack: tuple[str, ...]) -> bool:
    leaf = stack[-1].split(" (", 1)[0].rsplit(".", 1)[-1]
    return leaf in IDLE_LEAVES or "selectors.py" in stack[-1]


def callback(stack: tuple[str, ...]) -> str:
    """The frame just under asyncio's ``Handle._run``: the task or callback that held the loop."""
    for index, frame in enumerate(stack):
        if frame.startswith("Handle._run"):
            rest = [f for f in stack[index + 1 :] if not f.startswith(LOOP_FRAMES)]
            return rest[0] if rest else frame
    return stack[-1]


def below_loop(stack: tuple[str, ...]) -> tuple[str, ...]:
    """The frames the loop's current callback runs (those under ``Handle._run``), or all."""
    for index, frame in enumerate(stack):
        if frame.startswith("Handle._run"):
            return stack[index + 1 :]
    return stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("profile", help="chrome-trace JSON written by py-spy record")
    parser.add_argument("--thread", default="MainThread", help="thread running the event loop")
    parser.add_argument("--min-ms", type=float, default=50.0, help="report busy stretches longer than this")
    parser.add_argument("--top", type=int, default=15, help="functions to list")
    args = parser.parse_args(argv)
    stretches = timeline(json.loads(Path(args.profile).read_text()), args.thread)
    # Busy stretches: consecutive non-idle samples.
    busy: list[list[tuple[float, float, tuple[str, ...]]]] = []
    current: list[tuple[float, float, tuple[str, ...]]] = []
    for item in stretches:
        if idle(item[2]):
            if current:
                busy.append(current)
            current = []
        else:
            current.append(item)
    if current:
        busy.append(current)
    long = [b for b in busy if (b[-1][1] - b[0][0]) * 1000 >= args.min_ms]
    total_busy = sum(b[-1][1] - b[0][0] for b in busy)
    print(
        f"{args.profile}: {len(busy)} busy stretches, {total_busy:.2f} s busy in all; "
        f"{len(long)} of {args.min_ms:g} ms or more, {sum(b[-1][1] - b[0][0] for b in long):.2f} s"
    )
    by_callback: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stretch in long:
        length = stretch[-1][1] - stretch[0][0]
        held: Counter[str] = Counter()
        for start, end, stack in stretch:
            held[callback(stack)] += end - start
            by_callback[callback(stack)] += end - start
            for frame in set(below_loop(stack)):
                inclusive[frame] += end - start
        top = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in held.most_common(3))
        print(f"  at {stretch[0][0]:8.2f} s: {length * 1000:6.0f} ms  {top}")
    print("\nheld by (the callback the loop ran), over those stretches:")
    for name, seconds in by_callback.most_common(args.top):
        print(f"  {seconds * 1000:7.0f} ms  {name}")
    print("\ninclusive time per function under the loop's callbacks, over those stretches:")
    for name, seconds in inclusive.most_common(args.top * 2):
        print(f"  {seconds * 1000:7.0f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
