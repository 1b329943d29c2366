"""`tts-bench load`: fleet-scale closed- or open-loop load on Locust, over processes and hosts.

    tts-bench load --endpoint-url URL --users 256 --duration 60            # closed loop
    tts-bench load --endpoint-url URL --rate 40 --arrival poisson --duration 120
    tts-bench load --endpoint-url URL --step 10:60,20:60,40:60             # rps:seconds, ...
    tts-bench load --endpoint-url URL --trace surge.txt --processes 4      # send times, s
    tts-bench load ... --master --expect-workers 8                         # across hosts
    tts-bench load --worker --master-host 10.0.0.5                         # on each load host

Requests are timed with the qmax engine's StreamTimer and written as the same JSONL records.
Locust is imported only here (it monkey-patches the standard library with gevent).
"""

from __future__ import annotations

import argparse
import json
import math
from functools import partial
from pathlib import Path
from typing import Any

from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.option_table import (
    OptionSpec,
    _fail,
    add_to_argparse,
    positive_float,
    positive_int,
    specs_named,
)

FLAGS = ("--endpoint", "--endpoint-url", "--scenario", "--model", "--transport")
# How the load is scheduled: exactly one.
MODES = ("--users", "--rate", "--step", "--trace")
DEFAULT_MASTER_PORT = 5557
# Open loop without --max-in-flight: users enough for requests of this many seconds at the
# peak rate; an arrival that finds them all busy leaves late, and is counted.
POOL_SECONDS = 5.0


def step_levels(value: str) -> list[tuple[float, float]]:
    """`10:60,20:60` → [(10.0, 60.0), (20.0, 60.0)]: rates (rps) held for seconds, in order."""
    expected = "RATE:SECONDS levels separated by commas, e.g. 10:60,20:60 (rate >= 0, seconds > 0)"
    levels: list[tuple[float, float]] = []
    for part in value.split(","):
        rate_text, _, seconds_text = part.partition(":")
        try:
            rate, seconds = float(rate_text), float(seconds_text)
        except ValueError:
            raise _fail(value, expected) from None
        if not (math.isfinite(rate) and math.isfinite(seconds)) or rate < 0 or seconds <= 0:
            raise _fail(value, expected)
        levels.append((rate, seconds))
    return levels


def port(value: str) -> int:
    parsed = positive_int(value)
    if parsed > 65535:
        raise _fail(value, "a TCP port 1-65535")
    return parsed


LOAD_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "--users",
        "users",
        "Closed loop: N users, each with one request in flight, no think time. Default: none.",
        positive_int,
        None,
        "N",
    ),
    OptionSpec(
        "--rate",
        "rate",
        "Open loop: requests per second, scheduled by the clock. Default: none.",
        positive_float,
        None,
        "RPS",
    ),
    OptionSpec(
        "--arrival",
        "arrival",
        "Open-loop arrivals: constant spacing or poisson. Default: constant.",
        None,
        "constant",
        "KIND",
        ("constant", "poisson"),
    ),
    OptionSpec(
        "--step",
        "step",
        "Open loop: rates held one after another, RATE:SECONDS,... Default: none.",
        step_levels,
        None,
        "R:S,...",
    ),
    OptionSpec(
        "--trace",
        "trace",
        "Open loop: a file of send times in seconds from the start, "
        "one a line (e.g. a plan's surge). Default: none.",
        Path,
        None,
        "FILE",
    ),
    OptionSpec(
        "--duration",
        "duration",
        "Seconds of load (closed loop and --rate). Default: none.",
        positive_float,
        None,
        "S",
    ),
    OptionSpec(
        "--max-in-flight",
        "max_in_flight",
        "Open loop: users available to send "
        f"(requests in flight at most). Default: peak rate x {POOL_SECONDS:g} s, at "
        "least 16.",
        positive_int,
        None,
        "N",
    ),
    OptionSpec("--seed", "seed", "Seed of the Poisson arrivals. Default: 0.", int, 0, "N"),
    OptionSpec(
        "--processes",
        "processes",
        "Worker processes to start on this host (the "
        "master collects their records). Default: none (this process sends).",
        positive_int,
        0,
        "P",
    ),
    OptionSpec(
        "--master",
        "master",
        "Run as a master that waits for --expect-workers workers from other hosts. Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--expect-workers",
        "expect_workers",
        "Workers from other hosts the master waits for. Default: none.",
        positive_int,
        0,
        "K",
    ),
    OptionSpec(
        "--master-bind-host",
        "master_bind_host",
        "Interface the master listens on. Default: 127.0.0.1 (* for other hosts).",
        None,
        "127.0.0.1",
        "HOST",
    ),
    OptionSpec(
        "--master-bind-port",
        "master_bind_port",
        f"Port the master listens on. "
        f"Default: {DEFAULT_MASTER_PORT} with --master, else a free port.",
        port,
        None,
        "PORT",
    ),
    OptionSpec(
        "--worker",
        "worker",
        "Run as a worker of the master at --master-host; it sends everything else. Default: off.",
        action="store_true",
        default=False,
    ),
    OptionSpec(
        "--master-host",
        "master_host",
        "The master's address (with --worker). Default: 127.0.0.1.",
        None,
        "127.0.0.1",
        "HOST",
    ),
    OptionSpec(
        "--master-port",
        "master_port",
        f"The master's port (with --worker). Default: {DEFAULT_MASTER_PORT}.",
        port,
        DEFAULT_MASTER_PORT,
        "PORT",
    ),
    OptionSpec(
        "--records",
        "records",
        "Per-request records (JSONL, the qmax engine's rows). Default: none.",
        Path,
        None,
        "FILE",
    ),
    OptionSpec(
        "--summary", "summary", "The run's summary as JSON. Default: none.", Path, None, "FILE"
    ),
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "load",
        help="fleet-scale closed- or open-loop load on Locust, over processes and hosts",
        description="Load an endpoint with Locust used as a library: closed loop (--users N) "
        "or open loop (--rate, --step, --trace), in this process, over --processes P worker "
        "processes, or as --master of --worker processes on other hosts. Open-loop sends are "
        "scheduled by the clock, never by completions; a send that leaves late is counted.",
    )
    add_to_argparse(parser, specs_named(*FLAGS))
    # The four ways to schedule the load exclude each other; argparse says so (exit 2). One of
    # them is required except of a --worker, which takes its schedule from the master.
    modes = parser.add_mutually_exclusive_group()
    add_to_argparse(modes, tuple(spec for spec in LOAD_SPECS if spec.flag in MODES))
    add_to_argparse(parser, tuple(spec for spec in LOAD_SPECS if spec.flag not in MODES))
    parser.set_defaults(func=partial(run, parser=parser))


def schedule(args: argparse.Namespace) -> tuple[str, Any, float, float | None]:
    """Mode, send times (open loop), duration and the requested mean rate, from the flags."""
    from pytest_tts_scaling.core import arrivals

    # The parser's mutually exclusive group leaves exactly one of them set.
    [chosen] = [flag for flag in MODES if getattr(args, flag.removeprefix("--")) is not None]
    if (args.users is not None or args.rate is not None) and args.duration is None:
        raise InputError(f"{chosen} needs --duration S: expected the seconds of load")
    if (args.step is not None or args.trace is not None) and args.duration is not None:
        raise InputError(
            f"--duration with {chosen}: the schedule sets its own length; expected --duration "
            "only with --users or --rate"
        )
    if args.users is not None:
        return "closed", None, float(args.duration), None
    if args.rate is not None:
        times = arrivals.from_rates(
            [args.rate], dt_s=args.duration, arrival=args.arrival, seed=args.seed
        )
        return "open", times, float(args.duration), float(args.rate)
    if args.step is not None:
        times = arrivals.steps(args.step, arrival=args.arrival, seed=args.seed)
        total = sum(seconds for _, seconds in args.step)
        mean = sum(rate * seconds for rate, seconds in args.step) / total
        return "open", times, total, mean
    try:
        text = Path(args.trace).read_text(encoding="utf-8")
        times = arrivals.parse_trace(text, source=str(args.trace))
    except OSError as exc:
        raise InputError(f"--trace {args.trace}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(f"--trace {exc}") from None
    span = float(times[-1]) if times.size else 0.0
    return "open", times, span, None


def peak_rate(times: Any) -> float:
    """The most sends in any one second of the schedule."""
    import numpy as np

    if times is None or len(times) == 0:
        return 0.0
    counts = np.bincount(np.floor(np.asarray(times)).astype(int))
    return float(counts.max())


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.worker:
        from pytest_tts_scaling.fleet.runner import run_worker

        return run_worker(args.master_host, args.master_port)
    if all(getattr(args, flag.removeprefix("--")) is None for flag in MODES):
        parser.error(f"one of the arguments {' '.join(MODES)} is required")
    from pytest_tts_scaling.artifacts import write_atomic
    from pytest_tts_scaling.fleet.config import LoadConfig
    from pytest_tts_scaling.fleet.report import summarize_load
    from pytest_tts_scaling.options import RunOptions

    mode, times, duration, requested = schedule(args)
    if args.tts_endpoint:
        target, kind = args.tts_endpoint, "sagemaker"
    elif args.tts_endpoint_url:
        target, kind = args.tts_endpoint_url, "url"
    else:
        raise InputError("load needs a target: expected --endpoint-url URL or --endpoint NAME")
    if kind == "sagemaker" and args.tts_transport == "bidi":
        raise InputError(
            "--transport bidi with --endpoint: SageMaker's bidirectional stream needs the HTTP/2 "
            "SDK, which Locust's gevent cannot drive; expected --transport response-stream"
        )
    if args.expect_workers and not args.master:
        raise InputError("--expect-workers K needs --master")
    users = args.users or args.max_in_flight or max(16, math.ceil(peak_rate(times) * POOL_SECONDS))
    # A bad scenario file or an unset key is said here, once.
    options = RunOptions.from_namespace(
        {f"tts_{k}": getattr(args, f"tts_{k}") for k in ("scenario", "model", "transport")}
    )
    scenario = options.loaded_scenario
    if scenario is not None and scenario.listener.hang_up is not None:
        raise InputError(
            f"{scenario.path}: field 'listener.hang_up': load's Locust users do not hang up; "
            "expected a scenario without it (qmax and ttotal measure hang-ups)"
        )
    config = LoadConfig(
        target=target,
        transport=args.tts_transport or "response-stream",
        kind=kind,
        mode=mode,
        users=users,
        offsets_s=[] if times is None else [float(t) for t in times],
        # Worker processes may start elsewhere: they get the file, not a name.
        scenario=str(scenario.path.resolve()) if scenario is not None and scenario.path else None,
        model=options.model,
        component=options.inference_component,
        label=args.users or 0,
    )
    from pytest_tts_scaling.fleet.runner import run_load

    bind_port = args.master_bind_port or (DEFAULT_MASTER_PORT if args.master else 0)
    result = run_load(
        config,
        duration_s=duration,
        processes=args.processes,
        master=args.master,
        expect_workers=args.expect_workers,
        bind_host=args.master_bind_host,
        bind_port=bind_port,
        progress=lambda line: print(line, flush=True),
    )
    if result.failures:
        raise RuntimeError("tts-bench load: the users stopped: " + "; ".join(result.failures))
    summary = summarize_load(
        result.rows,
        mode=mode,
        processes=result.processes,
        requested_rps=requested,
        scheduled_rps=len(config.offsets_s) / duration if mode == "open" and duration else None,
        unsent=result.unsent,
        abandoned=result.abandoned,
    )
    if args.records is not None:
        ordered = sorted(result.rows, key=lambda r: r["epoch_start_ns"])
        write_atomic(args.records, _jsonl(ordered))
        write_atomic(inputs_path(args.records), _jsonl(result.inputs))
    if args.summary is not None:
        write_atomic(args.summary, json.dumps(summary.to_json(), indent=2) + "\n")
    for line in summary.lines():
        print(line)
    if args.records is not None:
        print(f"load: records {args.records}, inputs {inputs_path(args.records)}")
    return 0 if summary.statuses.get("ok") else 1


def inputs_path(records: Path) -> Path:
    """The inputs JSONL beside the records (`load.jsonl` -> `load.inputs.jsonl`)."""
    return records.with_name(records.stem + ".inputs.jsonl")


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
