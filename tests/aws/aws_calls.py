"""Every AWS call written in the source, found by reading it: what the IAM policies are derived
from and what the request-validation guard holds against the requests the tests recorded.

A call site is a method call named after an operation of one of the services below, on a
receiver the code names as a client (`sagemaker.describe_endpoint(...)`,
`self.client.invoke_endpoint_with_response_stream(...)`, `_client(client).start_build(...)`),
or a paginator asked for by operation name (`get_paginator("op")`, `_paginate(client, "op")`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore.session
from botocore import xform_name

ROOT = Path(__file__).resolve().parents[2]
# Where AWS is called from: the package, and the infra app (its own distribution or not, the
# folder is infra/). Tests and benchmarks are not product code.
SOURCES = (ROOT / "pytest_tts_scaling", ROOT / "infra")
# botocore service -> IAM action prefix.
SERVICES = {
    "sagemaker": "sagemaker",
    "sagemaker-runtime": "sagemaker",
    "application-autoscaling": "application-autoscaling",
    "cloudwatch": "cloudwatch",
    "logs": "logs",
    "codebuild": "codebuild",
}
# Not in botocore: the HTTP/2 SDK's one operation (aws-sdk-sagemaker-runtime-http2).
HTTP2_SERVICE = "sagemaker-runtime-http2"
HTTP2_OPERATIONS = {
    "invoke_endpoint_with_bidirectional_stream": "InvokeEndpointWithBidirectionalStream"
}
_RECEIVER = re.compile(r"(?:^|\.)(?:sagemaker|autoscaling|cloudwatch|logs|client|_client\(.*\))$")
PAGINATORS = {"get_paginator", "_paginate"}


@dataclass(frozen=True)
class CallSite:
    """One AWS call in the source: where it is, the function around it, what it calls."""

    path: str  # relative to the repository root
    line: int
    function: tuple[int, int]  # the enclosing function's first and last line
    service: str
    operation: str  # the API's name, e.g. DescribeEndpoint

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.service}.{self.operation}"


@cache
def operations() -> dict[str, set[tuple[str, str]]]:
    """Python method name -> {(service, OperationName)} over the services above."""
    session = botocore.session.get_session()
    by_name: dict[str, set[tuple[str, str]]] = {}
    for service in SERVICES:
        for operation in session.get_service_model(service).operation_names:
            by_name.setdefault(xform_name(operation), set()).add((service, operation))
    for name, operation in HTTP2_OPERATIONS.items():
        by_name.setdefault(name, set()).add((HTTP2_SERVICE, operation))
    return by_name


def _functions(tree: ast.AST) -> list[tuple[int, int]]:
    return [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _enclosing(spans: list[tuple[int, int]], line: int) -> tuple[int, int]:
    around = [span for span in spans if span[0] <= line <= span[1]]
    return min(around, key=lambda span: span[1] - span[0]) if around else (line, line)


def call_sites(under: tuple[Path, ...] = SOURCES) -> list[CallSite]:
    """Every AWS call in the Python files under `under`, in file and line order."""
    by_name = operations()
    found: list[CallSite] = []
    for folder in under:
        for path in sorted(folder.rglob("*.py")):
            if any(part in {".venv", "cdk.out", "node_modules"} for part in path.parts):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            spans = _functions(tree)
            relative = path.relative_to(ROOT).as_posix()
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                names: list[str] = []
                if isinstance(func, ast.Name | ast.Attribute):
                    called = func.id if isinstance(func, ast.Name) else func.attr
                    if called in PAGINATORS:
                        names = [
                            arg.value
                            for arg in node.args
                            if isinstance(arg, ast.Constant) and arg.value in by_name
                        ]
                    elif (
                        isinstance(func, ast.Attribute)
                        and called in by_name
                        and _RECEIVER.search(ast.unparse(func.value))
                    ):
                        names = [called]
                for name in names:
                    for service, operation in sorted(by_name[name]):
                        found.append(
                            CallSite(
                                relative,
                                node.lineno,
                                _enclosing(spans, node.lineno),
                                service,
                                operation,
                            )
                        )
    return sorted(found, key=lambda site: (site.path, site.line, site.operation))
