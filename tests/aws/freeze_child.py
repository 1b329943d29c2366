"""A qmax-like run for the signal tests: freeze the endpoint, say so, then wait to be stopped.

Usage: python freeze_child.py ENDPOINT ARTIFACTS_DIR  (AWS_ENDPOINT_URL points at moto)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.freeze import Terminated, freeze


def main() -> int:
    endpoint, artifacts_dir = sys.argv[1], Path(sys.argv[2])
    try:
        with freeze(AwsClients(), endpoint, artifacts_dir=artifacts_dir, log=print):
            print("FROZEN", flush=True)
            while True:
                time.sleep(0.05)
    except Terminated:
        print("TERMINATED", flush=True)
        return 143
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
