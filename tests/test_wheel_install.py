"""Built and checked like a release: the wheel and sdist hold what the plugin reads, twine
accepts them, and the base wheel, installed alone into a fresh virtual environment outside the
repository, measures a calibration server's known Q_max from an empty project.

The serial calibration server answers one request at a time, 100 ms each, first audio after
50 ms: at a 200 ms SLO rungs 1 and 2 pass and rung 3 fails, so Q_max is 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from pytest_tts_scaling.calibration import SerialStreamServer

ROOT = Path(__file__).resolve().parents[1]
# What the base install must not pull in: the extras' heavy packages, and the model's.
HEAVY = ("locust", "gevent", "aioboto3", "boto3", "matplotlib", "torch")


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it (as `python -m build` does)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


@pytest.fixture(scope="module")
def fresh(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment outside the repository with the base wheel and its dependencies
    only, from the configured package index."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    run(sys.executable, "-m", "venv", venv)
    [wheel] = dist.glob("*.whl")
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    return venv


def test_the_wheel_and_sdist_hold_scenarios_templates_and_py_typed(dist: Path) -> None:
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (
        "pytest_tts_scaling/py.typed",
        "pytest_tts_scaling/report/templates/page.html.j2",
        "pytest_tts_scaling/scenarios/__init__.py",
        "pytest_tts_scaling/scenarios/test_qmax.py",
        "pytest_tts_scaling/scenarios/kokoro-82m.toml",
        "pytest_tts_scaling/scenarios/templates/openai-speech.json.j2",
        "pytest_tts_scaling/scenarios/texts/assistant.txt",
    ):
        assert name in names, name
    # One copy: the scenarios live only under the package, nowhere else in the wheel.
    assert not [n for n in names if n.startswith("scenarios/")]
    with tarfile.open(sdist) as tar:
        held = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    assert {"scenarios/test_qmax.py", "scenarios/kokoro-82m.toml", "pyproject.toml"} <= held
    run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir())


def test_the_base_wheel_installs_light_and_measures_the_known_qmax(
    fresh: Path, tmp_path: Path
) -> None:
    installed = run(fresh / "bin" / "python", "-m", "pip", "list", "--format=json").stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert "pytest-tts-scaling" in names
    assert not names & set(HEAVY), sorted(names & set(HEAVY))

    project = tmp_path / "project"
    project.mkdir()
    with SerialStreamServer(service_s=0.1, first_audio_s=0.05) as server:
        done = run(
            *(fresh / "bin" / "python", "-m", "pytest", "-p", "no:cacheprovider"),
            *("-m", "qmax", "--endpoint-url", server.base_url, "--tts-ladder", "1,2,3"),
            *("--tts-hold-s", "2", "--tts-measure-s", "1.5", "--tts-gap-s", "0"),
            *("--tts-slo-ms", "200", "--html", "report.html", "--self-contained-html"),
            cwd=project,
        )
    assert "pytest_tts_scaling/scenarios/test_qmax.py" in done.stdout
    [artifact] = (project / "reports").glob("qmax-kokoro-82m-response-stream-url-*.json")
    assert json.loads(artifact.read_text())["q_max"] == 2
    assert (project / "report.html").is_file()


def test_a_step_that_needs_an_extra_names_it_in_one_line(fresh: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [fresh / "bin" / "tts-bench", "drift", "--endpoint", "speech-x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "[aws] extra" in done.stderr
    assert "pip install 'pytest-tts-scaling[aws]'" in done.stderr
