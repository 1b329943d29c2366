"""Scenario files (docs/workloads.md): the workload, and optionally the measurement, in one TOML
file.

A scenario names a text corpus and a length distribution (seeded), voices and how they are
picked, the request (method, path, headers, the body or a Jinja2 payload template), how the
response carries its payload (raw audio, JSON, or server-sent events), and ladder, SLO and
durations. Command-line options override what a scenario sets.

Header values may name environment variables as `${NAME}`, read when the scenario is loaded, so
keys stay out of files; artifacts name the headers sent, never their values.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import tomllib
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_tts_scaling.artifacts import first_error
from pytest_tts_scaling.core.decoding import ResponseFormat, compile_field
from pytest_tts_scaling.core.records import HttpRequest
from pytest_tts_scaling.errors import InputError


class ScenarioError(InputError):
    """A scenario file that cannot be used; the message names file, field and expectation."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthWords(_Section):
    mean: float = Field(gt=0)
    stddev: float = Field(default=0.0, ge=0)


class TextSection(_Section):
    corpus: list[str] = Field(min_length=1)
    length_words: LengthWords | None = None
    seed: int = 0
    pool_size: int = Field(default=256, ge=1, le=100_000)


class VoiceSection(_Section):
    names: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    selection: Literal["round_robin", "random"] = "round_robin"
    seed: int = 0


ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"


class RequestSection(_Section):
    speed: float = Field(default=1.0, ge=0.5, le=2.0)
    format: Literal["pcm", "wav"] = "pcm"
    template: str | None = None
    method: Literal["POST", "PUT"] = "POST"
    path: str = Field(default="/invocations", pattern=r"^/[^\s]*$")
    headers: dict[Annotated[str, Field(pattern=HEADER_NAME)], str] = Field(default_factory=dict)
    # Sent only when every environment variable the value names is set (an optional key).
    headers_when_set: dict[Annotated[str, Field(pattern=HEADER_NAME)], str] = Field(
        default_factory=dict
    )
    response: Literal["audio", "json", "sse"] = "audio"
    response_field: str | None = None
    response_encoding: Literal["base64", "none"] = "base64"
    response_streamed: bool = True
    # sse: the event that ends the answer (its `event:` name or its JSON's "type").
    response_end_event: str | None = None
    sample_rate: int = Field(default=24000, ge=0)

    @field_validator("response_field")
    @classmethod
    def _jmespath(cls, value: str | None) -> str | None:
        if value is not None:
            compile_field(value)
        return value


class MeasureSection(_Section):
    transport: Literal["response-stream", "bidi"] | None = None
    ladder: list[Annotated[int, Field(ge=1)]] | None = None
    slo_ms: float | None = Field(default=None, gt=0)
    hold_s: float | None = Field(default=None, gt=0)
    measure_s: float | None = Field(default=None, gt=0)
    gap_s: float | None = Field(default=None, ge=0)

    @field_validator("ladder")
    @classmethod
    def _increasing(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(b <= a for a, b in pairwise(value)):
            raise ValueError("expected whole numbers >= 1 in increasing order")
        return value


class HangUpSection(_Section):
    """A share of requests the listener closes once some audio has arrived (barge-in)."""

    fraction: float = Field(gt=0, le=1)
    after_audio_s: float = Field(gt=0)


class ListenerSection(_Section):
    hang_up: HangUpSection | None = None


class EndpointSection(_Section):
    model: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    inference_component: str | None = None


class Scenario(_Section):
    name: str = Field(min_length=1)
    description: str = ""
    text: TextSection
    voices: VoiceSection = VoiceSection(names=["af_heart"])
    request: RequestSection = RequestSection()
    measure: MeasureSection = MeasureSection()
    endpoint: EndpointSection = EndpointSection()
    listener: ListenerSection = ListenerSection()
    path: Path | None = None

    def settings(self) -> dict[str, object]:
        """The run options this scenario sets, by RunOptions field name."""
        measure = self.measure
        values: dict[str, object] = {
            "transport": measure.transport,
            "ladder": tuple(measure.ladder) if measure.ladder else None,
            "slo_ms": measure.slo_ms,
            "hold_s": measure.hold_s,
            "measure_s": measure.measure_s,
            "gap_s": measure.gap_s,
            "model": self.endpoint.model,
            "endpoint_url": self.endpoint.url,
            "inference_component": self.endpoint.inference_component,
        }
        return {key: value for key, value in values.items() if value is not None}

    def response_format(self) -> ResponseFormat:
        if self.request.response == "audio":
            return ResponseFormat(kind="audio")
        return ResponseFormat(
            kind=self.request.response,
            field=self.request.response_field,
            encoding=self.request.response_encoding,
            streamed=self.request.response_streamed,
            end_event=self.request.response_end_event,
        )

    def http_request(self, environ: Mapping[str, str] | None = None) -> HttpRequest:
        """Method, path and headers, `${NAME}` read from the environment.

        A header in `headers` whose variable is unset is an error naming both; one in
        `headers_when_set` is left out.
        """
        environ = os.environ if environ is None else environ
        request = self.request
        headers: list[tuple[str, str]] = []
        for table, required in (("headers", True), ("headers_when_set", False)):
            for name, value in getattr(request, table).items():
                missing = [v for v in ENV_REFERENCE.findall(value) if not environ.get(v)]
                if missing and required:
                    raise ScenarioError(
                        f"{self.path}: field 'request.{table}.{name}': environment variable "
                        f"{missing[0]} is not set; expected it set (or the header in "
                        "request.headers_when_set)"
                    )
                if missing:
                    continue
                sent = ENV_REFERENCE.sub(lambda m: environ[m.group(1)], value)
                if "\r" in sent or "\n" in sent:
                    raise ScenarioError(
                        f"{self.path}: field 'request.{table}.{name}': expected a value on one "
                        "line (it, or a variable it names, holds a line break)"
                    )
                headers.append((name, sent))
        return HttpRequest(method=request.method, path=request.path, headers=tuple(headers))

    def request_summary(self, sent: HttpRequest) -> dict[str, object]:
        """What artifacts keep of the request `sent`: header names, never values."""
        return {
            "method": sent.method,
            "path": sent.path,
            "headers": [name for name, _ in sent.headers],
            "response": self.request.response,
        }


def shipped_folder() -> Path:
    """The scenarios that ship with the plugin: the package `pytest_tts_scaling.scenarios`, which
    is the checkout's top-level scenarios/ (an editable install maps it there, a wheel holds it)."""
    return Path(str(importlib.resources.files("pytest_tts_scaling.scenarios")))


def resolve(name_or_path: str, search: list[Path]) -> Path:
    """A path as given, else `NAME.toml` in the first scenarios directory that has it, the
    shipped scenarios last (so `--scenario openai-speech` works from any directory)."""
    search = [*search, shipped_folder()]
    direct = Path(name_or_path)
    if direct.suffix == ".toml" or direct.exists():
        if not direct.is_file():
            raise ScenarioError(f"--scenario {name_or_path}: no such scenario file")
        return direct
    for folder in search:
        candidate = folder / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for folder in search for p in folder.glob("*.toml")})
    raise ScenarioError(
        f"--scenario {name_or_path}: no scenario of that name; expected a .toml path or one of: "
        f"{', '.join(known) or '(none found)'}"
    )


def load_scenario(path: Path) -> Scenario:
    """Parse and check a scenario file, its corpus files and its template."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not TOML: {exc}") from None
    try:
        scenario = Scenario.model_validate({**raw, "path": path})
    except ValidationError as exc:
        raise ScenarioError(f"{path}: {first_error(exc)}") from None
    request = scenario.request
    if request.response != "audio" and request.response_field is None:
        raise ScenarioError(
            f"{path}: field 'request.response_field': expected a JMESPath expression when "
            f'request.response is "{request.response}"'
        )
    scenario.http_request()  # an unset variable a header needs is said now, not mid-run
    for index, entry in enumerate(scenario.text.corpus):
        if not (path.parent / entry).is_file():
            raise ScenarioError(
                f"{path}: field 'text.corpus.{index}': no such file {entry!r} "
                f"(paths are relative to {path.parent})"
            )
    if request.template is not None:
        template_path = path.parent / request.template
        try:
            template_environment(path.parent).parse(template_path.read_text(encoding="utf-8"))
        except OSError:
            raise ScenarioError(
                f"{path}: field 'request.template': no such file {request.template!r}"
            ) from None
        except jinja2.TemplateSyntaxError as exc:
            raise ScenarioError(
                f"{path}: field 'request.template': {request.template} line {exc.lineno}: "
                f"{exc.message}"
            ) from None
    return scenario


def template_environment(folder: Path) -> jinja2.Environment:
    """Templates fail loudly on an undefined variable rather than sending an empty field."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
    )
