"""Emulator tick cost: GetCustomJob latency with 10 and with 5,000 waiting jobs.

For each size, a fresh ``dws-emulator serve`` process (one empty ``NVIDIA_H100_80GB`` pool, so
nothing ever starts) receives N Vertex AI Flex Start custom jobs that wait indefinitely
(``max_wait_duration`` 0), then the median latency of ``GetCustomJob`` on one of them is measured
through the unmodified ``JobServiceClient`` on an insecure channel. The emulator's background
ticker keeps running meanwhile, so the figure includes whatever its ticks cost. The ratio of the
two medians is the tick's dependence on how many requests exist (target: at most ~1.5x).

Run ``python benchmarks/emulator_tick.py [--sizes 10,5000] [--calls 300] [--json out.json]``;
the exit status is 1 when the ratio misses ``--target``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

PROJECT = "dws-tick"
LOCATION = "us-central1"
POOL = f"{LOCATION}/NVIDIA_H100_80GB"


def _job() -> Any:
    from google.cloud.aiplatform_v1 import types

    return types.CustomJob(
        display_name="tick",
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(
                        machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_H100_80GB", accelerator_count=8
                    ),
                    container_spec=types.ContainerSpec(image_uri="bench"),
                )
            ],
            # 0 means "wait indefinitely": the jobs stay queued for the whole run.
            scheduling=types.Scheduling(strategy="FLEX_START", max_wait_duration=timedelta(0)),
        ),
    )


def measure(size: int, calls: int, log_dir: Path) -> dict[str, Any]:
    """Start an emulator, queue ``size`` jobs, time ``calls`` GetCustomJob calls; the emulator is stopped."""
    import grpc
    from google.cloud.aiplatform_v1 import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    from dws_emulator.process import EmulatorProcess

    emulator = EmulatorProcess({POOL: 0}, 0, log_dir / f"emulator-{size}.log")
    try:
        channel = grpc.insecure_channel(emulator.address)
        client = JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
        parent = f"projects/{PROJECT}/locations/{LOCATION}"
        job = _job()
        started = time.perf_counter()
        names = [client.create_custom_job(parent=parent, custom_job=job).name for _ in range(size)]
        create_s = time.perf_counter() - started
        queued = emulator.control.capacity()[POOL]["queued"]
        assert queued == size, f"expected {size} queued jobs, the emulator has {queued}"
        target = names[len(names) // 2]
        for _ in range(20):  # warm up the channel and the server's handler cache
            client.get_custom_job(name=target)
        latencies = []
        for _ in range(calls):
            t0 = time.perf_counter()
            client.get_custom_job(name=target)
            latencies.append(time.perf_counter() - t0)
        channel.close()
    finally:
        emulator.stop()
    latencies.sort()
    return {
        "size": size,
        "calls": calls,
        "create_s": round(create_s, 2),
        "median_ms": round(statistics.median(latencies) * 1000, 3),
        "p90_ms": round(latencies[int(len(latencies) * 0.9)] * 1000, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="10,5000", help="comma-separated waiting-job counts (default 10,5000)"
    )
    parser.add_argument("--calls", type=int, default=300, help="GetCustomJob calls timed per size")
    parser.add_argument("--target", type=float, default=1.5, help="largest acceptable latency ratio")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="emulator-tick-") as tmp:
        results = [measure(size, args.calls, Path(tmp)) for size in sizes]
    print(f"{'waiting':>8}  {'create s':>9}  {'median ms':>10}  {'p90 ms':>8}")
    for r in results:
        print(f"{r['size']:>8}  {r['create_s']:>9}  {r['median_ms']:>10}  {r['p90_ms']:>8}")
    ratio = results[-1]["median_ms"] / results[0]["median_ms"]
    verdict = "PASS" if ratio <= args.target else "FAIL"
    print(f"ratio {sizes[-1]} / {sizes[0]} waiting: {ratio:.2f}x (target <= {args.target:g}x): {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "ratio": ratio}, indent=2))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
