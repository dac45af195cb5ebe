"""A loopback Alertmanager webhook receiver that keeps every notification it gets.

    with WebhookReceiver() as hook:            # serves http://127.0.0.1:<port>/<receiver>
        hook.url("pager")                       # the URL to give the `pager` receiver
        hook.wait_for(lambda n: ..., timeout=30)  # the first notification that matches

Each notification is the Alertmanager webhook JSON (version 4) plus the path it was posted to.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body["path"] = self.path
        with self.server.lock:
            self.server.notifications.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:  # keep test output clean
        pass


class WebhookReceiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.notifications = []
        self.server.lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, receiver: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/{receiver}"

    @property
    def notifications(self) -> list[dict]:
        with self.server.lock:
            return list(self.server.notifications)

    def wait_for(self, match: Callable[[dict], bool], timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for notification in self.notifications:
                if match(notification):
                    return notification
            time.sleep(0.2)
        raise AssertionError(f"no matching notification within {timeout}s; got "
                             f"{json.dumps(self.notifications, indent=1)[:4000]}")


def alerts_in(notification: dict, alertname: str, status: str) -> list[dict]:
    """The alerts of one notification with this name and status ("firing" / "resolved")."""
    return [a for a in notification["alerts"]
            if a["labels"].get("alertname") == alertname and a["status"] == status]
