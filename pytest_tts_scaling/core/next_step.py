"""What to run next when even one request alone misses the SLO. Pure: an artifact in, words out.

On a busy host (a laptop, a shared 2-core machine) the local container can take seconds for one
answer; the run then measured nothing worth planning on, and the user needs commands, not a
diagnosis: a looser SLO that N=1 meets, a quieter machine, the development model to check the
setup.
"""

from __future__ import annotations

import math
from typing import Literal

from pytest_tts_scaling.core.schema import QmaxArtifact

# The SLO suggested is N=1's p95 with this much room for the rungs above it, rounded up.
SLO_ROOM = 1.5
SLO_ROUND_MS = 500

Door = Literal["pytest", "tts-bench"]


def suggested_slo_ms(p95_ms: float) -> int:
    """N=1's p95 with room for a few requests more, rounded up to a round number."""
    return int(math.ceil(p95_ms * SLO_ROOM / SLO_ROUND_MS) * SLO_ROUND_MS)


def next_step_line(a: QmaxArtifact, door: Door) -> str | None:
    """`next: ...` commands when N=1 alone missed the SLO on latency; None otherwise."""
    if a.q_max is not None:
        return None
    one = next((r for r in a.rungs if r.concurrency == 1), None)
    if one is None or not one.usable or one.fail_reason != "slo":
        return None
    p95 = one.judged_p95_ms
    if p95 is None:
        return None
    slo = suggested_slo_ms(p95)
    local = a.provenance.origin.startswith("local:")
    if door == "pytest":
        looser = f'make qmax ARGS="--tts-slo-ms {slo}"' if local else f"--tts-slo-ms {slo}"
        untrained = "WEIGHTS=untrained make qmax"
    else:
        looser = f"tts-bench qmax --slo-ms {slo}"
        untrained = "WEIGHTS=untrained tts-bench qmax"
    steps = [
        f"{looser} (N=1 alone took p95 {p95:.0f} ms against the SLO {a.slo_ms:g} ms)",
    ]
    loads = [r.load_avg_1m for r in a.rungs if r.load_avg_1m is not None]
    if a.host is not None and loads:
        busy = max(loads) > a.host.cpu_count
        steps.append(
            f"{'stop other work or ' if busy else ''}run on a quieter or larger machine (load "
            f"average {max(loads):.1f} on {a.host.cpu_count} cores)"
        )
    config = a.deployed_config
    if local and not config.development_model and not config.synthetic_engine:
        steps.append(
            f"{untrained} checks the setup on the untrained development model (the same "
            "network, so about the same cost per request)"
        )
    return "next: " + "; or ".join(steps)
