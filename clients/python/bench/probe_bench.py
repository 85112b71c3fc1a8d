"""Benchmarks of the Python probe library (stepd.probe) against a real daemon.

    .tools/venv/bin/python clients/python/bench/probe_bench.py [--holds N] [--observed N]

1. hold round trip on loopback: a point holds → a subscriber (another process)
   sees the pause on Subscribe → answers CONTINUE on the same stream → the
   program resumes; p50/p99 over N holds.
2. cost of a point that does not hold, against the same loop without it
   (timeit, ns per call), for several armings.
3. observed events into the daemon: N `observe` calls as fast as one thread
   makes them; the rate is counted when the daemon has published every one of
   them (its event seq advanced by N, drops included as a gap).

Prints Markdown tables and writes bench/results/probe_python.json.
Uses $STEPD_BIN, else target/release/stepd, else target/debug/stepd.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

import stepd  # noqa: E402


def stepd_bin() -> Path:
    if os.environ.get("STEPD_BIN"):
        return Path(os.environ["STEPD_BIN"])
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "stepd"
        if path.exists():
            return path
    raise SystemExit("build stepd first (cargo build --release -p stepd)")


def start_daemon(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [str(stepd_bin()), "--listen", "127.0.0.1:0", "--data-dir", data_dir, "--no-unix-socket",
         "--subscriber-buffer", "1048576"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("stepd ready"):
        raise SystemExit(f"stepd did not start: {line!r}")
    return proc, line.split("tcp=")[1].split()[0]


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


# -- 1. hold round trip ----------------------------------------------------------------------------


ANSWERERS = {
    "stream": "`stepd.Client().events()`, `send_input` on the stream",
    "unary": "`stepd.Client().events()`, `SendDebugInput`",
    "aio": "`stepd.aio.Client().events()`, `send_input` on the stream",
}
#: The answer, and what it means for the daemon: CONTINUE at a breakpoint hit
#: (the daemon counts the hit in its store), NEXT in step mode (no counting).
COMMANDS = {"continue": "CONTINUE (breakpoint hit)", "next": "NEXT (step mode)"}


def answerer(addr: str, run: str, how: str, command: str) -> None:
    """The subscriber process: answers every new pause of run `run` with `command`."""

    def ours(event: Any) -> bool:
        if not event.HasField("stopped"):
            return False
        pause = event.stopped.pause
        return bool(pause.revision == 0 and pause.point.labels.get("run") == run)

    if how == "aio":
        import asyncio

        from stepd import aio

        async def main() -> None:
            async with aio.Client(addr) as client:
                async with client.events(channels=["execution"]) as events:
                    print("ready", flush=True)
                    async for event in events:
                        if ours(event):
                            await events.send_input(event.stopped.pause.key, command)

        asyncio.run(main())
        return
    with stepd.Client(addr) as client, client.events(channels=["execution"]) as events:
        print("ready", flush=True)
        for event in events:
            if ours(event):
                if how == "unary":
                    client.send_debug_input(event.stopped.pause.key, command)
                else:
                    events.send_input(event.stopped.pause.key, command)


def bench_holds(addr: str, n: int, warmup: int, how: str, command: str) -> dict[str, Any]:
    run = f"bench-{os.getpid()}-{how}-{command}"
    helper = subprocess.Popen(
        [sys.executable, __file__, "--answer", addr, run, how, command], stdout=subprocess.PIPE, text=True
    )
    assert helper.stdout is not None
    assert helper.stdout.readline().strip() == "ready"
    probe = stepd.probe.connect(name="bench-holds", labels={"run": run}, addr=addr)
    with stepd.Client(addr) as client:
        version = probe.arming_version
        bp = client.add_breakpoint(probe_kind="bench", label_selector=f"run={run}").breakpoint
        probe.wait_armed(version, 10)
        samples: list[float] = []
        try:
            for i in range(warmup + n):
                t0 = time.perf_counter_ns()
                probe.hold("bench", name="rt", value=i)
                dt = time.perf_counter_ns() - t0
                if i >= warmup:
                    samples.append(dt / 1e6)
        finally:
            client.remove_breakpoint(bp.id)
            probe.close()
            helper.kill()
            helper.wait()
    return {
        "answered_by": ANSWERERS[how],
        "answer": COMMANDS[command],
        "holds": n,
        "p50_ms": pct(samples, 50),
        "p90_ms": pct(samples, 90),
        "p99_ms": pct(samples, 99),
        "max_ms": max(samples),
        "mean_ms": statistics.fmean(samples),
        "samples_ms": samples,
    }


# -- 2. points that do not hold ------------------------------------------------------------------


def bench_unarmed(addr: str, number: int) -> list[dict[str, Any]]:
    run = f"bench-unarmed-{os.getpid()}"
    probe = stepd.probe.connect(name="bench-unarmed", labels={"run": run}, addr=addr)
    args = {"command": "ls -la", "timeout": 10}
    out: list[dict[str, Any]] = []

    def measure(label: str, stmt: str, setup: str = "") -> None:
        env = {"probe": probe, "args": args}
        base = min(timeit.repeat("x = args", setup=setup, globals=env, number=number, repeat=5))
        with_point = min(timeit.repeat(stmt, setup=setup, globals=env, number=number, repeat=5))
        out.append({
            "case": label,
            "ns_per_call": (with_point - base) / number * 1e9,
            "baseline_ns": base / number * 1e9,
            "calls": number,
        })  # fmt: skip

    hold = 'x = probe.hold("tool_call", name="Bash", value=args, editable=True)'
    measure("no breakpoints, depth 0", hold)
    scope = probe.scope("turn")
    scope.__enter__()
    measure("no breakpoints, inside a scope (depth 1)", hold)
    with stepd.Client(addr) as client:
        for label, spec in (
            ("a breakpoint on another kind", {"probe_kind": "model_request"}),
            ("a breakpoint on another tool name (glob)", {"probe_kind": "tool_call", "probe_name": "web_*"}),
            ("a breakpoint whose condition is false", {"probe_kind": "tool_call", "condition": 'value.command contains "rm -rf"'}),
        ):
            version = probe.arming_version
            bp = client.add_breakpoint(label_selector=f"run={run}", **spec).breakpoint  # type: ignore[arg-type]
            probe.wait_armed(version, 10)
            measure(f"{label}, depth 1", hold)
            version = probe.arming_version
            client.remove_breakpoint(bp.id)
            probe.wait_armed(version, 10)
        # Armed for someone else's request: a breakpoint on this very point,
        # scoped to one session's baggage, in requests that carry another
        # session's baggage (in the OpenTelemetry context) or none.
        version = probe.arming_version
        bp = client.add_breakpoint(
            label_selector=f"run={run}", probe_kind="tool_call", probe_name="Bash", baggage={"debug-session": "ana"}
        ).breakpoint
        probe.wait_armed(version, 10)
        measure("a breakpoint on this point for another request's baggage, request without baggage, depth 1", hold)
        from opentelemetry import baggage, context

        token = context.attach(baggage.set_baggage("tenant", "blue", baggage.set_baggage("debug-session", "bob")))
        measure("a breakpoint on this point for another request's baggage, request with baggage, depth 1", hold)
        context.detach(token)
        # Stepping ana's request: her request holds at that breakpoint and is
        # answered NEXT, so the probe steps her request only; everyone else's
        # points are decided by the breakpoints alone.
        import threading

        version = probe.arming_version
        ana = threading.Thread(target=probe.hold, args=("tool_call", "Bash", args), kwargs={"baggage": {"debug-session": "ana"}})
        ana.start()
        client.send_debug_input(client.wait_for_pause(probe.session_id).key, "next")
        ana.join(10)
        probe.wait_armed(version, 10)
        assert probe._arming.scope, "not stepping ana's request"
        measure("a step in another request (NEXT from its hold), request without baggage, depth 1", hold)
        token = context.attach(baggage.set_baggage("tenant", "blue", baggage.set_baggage("debug-session", "bob")))
        measure("a step in another request (NEXT from its hold), request with baggage, depth 1", hold)
        context.detach(token)
        version = probe.arming_version
        client.remove_breakpoint(bp.id)
        probe.wait_armed(version, 10)

    @probe.point("tool_call")
    def decorated(command: str, timeout: int) -> None:
        return None

    def plain(command: str, timeout: int) -> None:
        return None

    env = {"decorated": decorated, "plain": plain}
    base = min(timeit.repeat('plain("ls", 10)', globals=env, number=number, repeat=5))
    deco = min(timeit.repeat('decorated("ls", 10)', globals=env, number=number, repeat=5))
    out.append({
        "case": "@probe.point decorator vs the undecorated call, depth 1",
        "ns_per_call": (deco - base) / number * 1e9,
        "baseline_ns": base / number * 1e9,
        "calls": number,
    })  # fmt: skip
    scope.__exit__(None, None, None)
    probe.close()
    return out


# -- 3. observed events ------------------------------------------------------------------------------


def bench_observed(addr: str, n: int) -> dict[str, Any]:
    with stepd.Client(addr) as client:
        probe = stepd.probe.connect(name="bench-observed", addr=addr)
        before = client.get_status().last_seq
        value = {"url": "https://example.com/", "status": 200}
        t0 = time.perf_counter()
        for i in range(n):
            probe.observe("web_source", "fetch", value)
        t_calls = time.perf_counter() - t0
        probe.flush(60)
        dropped = probe.dropped_total
        # Every report the daemon received is one event; each batch with drops adds one gap.
        want = n - dropped
        deadline = time.monotonic() + 60
        published = 0
        while time.monotonic() < deadline:
            published = client.get_status().last_seq - before
            if published >= want:
                break
            time.sleep(0.002)
        t_daemon = time.perf_counter() - t0
        probe.close()
    return {
        "observed": n,
        "dropped": dropped,
        "published_events": published,
        "calls_per_s": n / t_calls,
        "ns_per_observe_call": t_calls / n * 1e9,
        "into_daemon_per_s": (n - dropped) / t_daemon,
        "seconds": t_daemon,
    }


def bench_observed_paced(addr: str, rate: int, seconds: float) -> dict[str, Any]:
    """`rate` observe calls per second for `seconds`: does the daemon keep up without drops?"""
    with stepd.Client(addr) as client:
        probe = stepd.probe.connect(name="bench-paced", addr=addr)
        before = client.get_status().last_seq
        value = {"url": "https://example.com/", "status": 200}
        n = int(rate * seconds)
        t0 = time.perf_counter()
        for i in range(n):
            if i % 100 == 0:
                ahead = t0 + i / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)  # releases the GIL to the probe's sender thread
            probe.observe("web_source", "fetch", value)
        probe.flush(60)
        dropped = probe.dropped_total
        deadline = time.monotonic() + 60
        published = 0
        while time.monotonic() < deadline:
            published = client.get_status().last_seq - before
            if published >= n - dropped:
                break
            time.sleep(0.002)
        t_daemon = time.perf_counter() - t0
        probe.close()
    return {"observed": n, "target_per_s": rate, "dropped": dropped, "into_daemon_per_s": (n - dropped) / t_daemon}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--holds", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--observed", type=int, default=300_000)
    parser.add_argument("--only-unarmed", action="store_true", help="measure only points that do not hold")
    parser.add_argument("--answer", nargs=4, metavar=("ADDR", "RUN", "HOW", "COMMAND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.answer:
        answerer(*args.answer)
        return
    with tempfile.TemporaryDirectory(prefix="stepd-bench-") as data_dir:
        proc, addr = start_daemon(data_dir)
        try:
            if args.only_unarmed:
                for row in bench_unarmed(addr, args.calls):
                    print(f"| {row['case']} | {row['ns_per_call']:.0f} | {row['baseline_ns']:.0f} |")
                return
            holds = [
                bench_holds(addr, args.holds, args.warmup, how, command)
                for how in ("stream", "aio")
                for command in COMMANDS
            ]
            unarmed = bench_unarmed(addr, args.calls)
            observed = bench_observed(addr, args.observed)
            paced = bench_observed_paced(addr, 100_000, 3.0)
        finally:
            proc.kill()
            proc.wait()
    print(f"stepd: {stepd_bin().relative_to(REPO) if stepd_bin().is_relative_to(REPO) else stepd_bin()}; "
          f"Python {platform.python_version()}; {os.cpu_count()} CPUs")  # fmt: skip
    print("\n| hold round trip: the subscriber | answer | holds | p50 | p90 | p99 | max | mean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for h in holds:
        print(f"| {h['answered_by']} | {h['answer']} | {h['holds']} | {h['p50_ms']:.3f} ms | {h['p90_ms']:.3f} ms | "
              f"{h['p99_ms']:.3f} ms | {h['max_ms']:.3f} ms | {h['mean_ms']:.3f} ms |")  # fmt: skip
    print("\n| point that does not hold | added ns/call | baseline ns/call |\n| --- | --- | --- |")
    for row in unarmed:
        print(f"| {row['case']} | {row['ns_per_call']:.0f} | {row['baseline_ns']:.0f} |")
    o = observed
    print("\n| observed events | count | dropped (reported as gaps) | observe() calls/s | into the daemon /s |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| one thread, `probe.observe` in a loop | {o['observed']} | {o['dropped']} | "
          f"{o['calls_per_s']:,.0f} | {o['into_daemon_per_s']:,.0f} |")  # fmt: skip
    q = paced
    print(f"| one thread paced at {q['target_per_s']:,}/s for 3 s | {q['observed']} | {q['dropped']} | "
          f"{q['target_per_s']:,} | {q['into_daemon_per_s']:,.0f} |")  # fmt: skip
    results = REPO / "bench" / "results" / "probe_python.json"
    results.write_text(json.dumps({
        "stepd": str(stepd_bin().name), "python": platform.python_version(), "cpus": os.cpu_count(),
        "holds": holds, "unarmed": unarmed, "observed": observed, "observed_paced": paced,
    }, indent=1) + "\n")  # fmt: skip
    print(f"\nraw numbers: {results.relative_to(REPO)}")


if __name__ == "__main__":
    main()
