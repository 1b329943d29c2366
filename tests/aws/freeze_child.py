"""A qmax-like run for the signal and lock tests: freeze the endpoint, say so, wait to be stopped.

Usage: python freeze_child.py ENDPOINT ARTIFACTS_DIR [--force]  (AWS_ENDPOINT_URL points at moto)
Exit status as tts-bench's: 128 + the signal, 2 when the freeze is refused.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.lifecycle.freeze import freeze
from pytest_tts_scaling.aws.lifecycle.signals import Terminated
from pytest_tts_scaling.errors import InputError


def main() -> int:
    endpoint, artifacts_dir = sys.argv[1], Path(sys.argv[2])
    # A job a non-interactive shell starts in the background (CI's `make test &`) inherits SIGINT
    # ignored, and Python then installs no handler: the child of such a run would never hear
    # the Ctrl-C the test sends. A user's tts-bench runs in the foreground, where it is heard.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with freeze(
            AwsClients(),
            endpoint,
            artifacts_dir=artifacts_dir,
            log=print,
            force="--force" in sys.argv[3:],
        ):
            print("FROZEN", flush=True)
            while True:
                time.sleep(0.05)
    except InputError as exc:
        print(f"REFUSED: {exc}", flush=True)
        return 2
    except Terminated as exc:
        print(f"TERMINATED: {exc}", flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
