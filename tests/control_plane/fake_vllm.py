"""A stand-in for the `vllm` CLI where a real one (90-200 s to start) would only slow a test of
how the control plane launches, waits for and stops it: `serve <model> --served-model-name N
--host H --port P ...` answers /health and /v1/models, and it leaves a grandchild behind on
SIGTERM, as vLLM's engine core could, so that only a process-group stop cleans up.

    executable = fake_vllm.install(tmp_path)      # a script to name as the template's executable
    record = fake_vllm.record(env_path)           # {"argv": [...], "env": {...}, "child": pid}

Environment: FAKE_VLLM_RECORD (a JSON file it writes at start), FAKE_VLLM_LISTS (the model name
/v1/models lists; default the served name), VLLM_API_KEY (as vLLM: /v1 routes then answer 401
without `Authorization: Bearer <key>`; /health stays open).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def install(folder: Path) -> Path:
    """An executable script in `folder` that runs this module with the project's interpreter."""
    path = folder / "vllm"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    path.chmod(0o755)
    return path


def record(path: Path) -> dict:
    return json.loads(path.read_text())


def _handler(listed: str, api_key: str | None):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            if api_key and self.path.startswith("/v1") \
                    and self.headers.get("authorization") != f"Bearer {api_key}":
                self.send_error(401)
                return
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": listed}]}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args, _flags = parser.parse_known_args()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if target := os.environ.get("FAKE_VLLM_RECORD"):
        Path(target).write_text(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ),
                                            "child": child.pid, "pid": os.getpid()}))
    print(f"fake vllm serving {args.model} as {args.served_model_name}", flush=True)
    listed = os.environ.get("FAKE_VLLM_LISTS", args.served_model_name)
    handler = _handler(listed, os.environ.get("VLLM_API_KEY"))
    ThreadingHTTPServer((args.host, args.port), handler).serve_forever()


if __name__ == "__main__":
    main()
