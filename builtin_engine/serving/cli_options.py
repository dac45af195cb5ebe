"""What both `serve` paths take from the command line (generation: builtin_engine/cli.py,
embeddings: embeddings/cli.py).

    loaded = load_model(config, progress=LoadProgress())   # "[engine] weights:  40%" lines
    config = uvicorn_config(app, connection_limits_from_args(args), ...)
"""
from __future__ import annotations

import argparse
import sys

from common.connections import ConnectionLimits


class LoadProgress:
    """Load progress on stderr: one line per 10% step, so it reads well in logs and terminals."""

    def __init__(self) -> None:
        self.shown: dict[str, int] = {}

    def __call__(self, stage: str, frac: float) -> None:
        step = int(frac * 10)
        if self.shown.get(stage, -1) < step:
            self.shown[stage] = step
            print(f"[engine] {stage}: {int(frac * 100):3d}%", file=sys.stderr, flush=True)


def connection_limits_from_args(a: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(keep_alive_s=a.timeout_keep_alive, header_timeout_s=a.header_timeout,
                            body_timeout_s=a.body_timeout, max_connections=a.max_connections,
                            max_body_bytes=a.max_body_bytes)
