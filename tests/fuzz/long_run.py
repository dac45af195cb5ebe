"""A longer, randomised fuzz of both surfaces (not part of the suite; minutes, not seconds).

    python -m tests.fuzz.long_run --examples 100 --budget-s 600 [--serve-s 0]

Prints the cases sent, the statuses seen and every failure (server errors, undocumented
statuses, responses off their schema, valid requests refused). With --serve-s N the servers
stay up N seconds afterwards, e.g. for the schemathesis CLI against the printed URLs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

from tests.fuzz.harness import fuzz
from tests.fuzz.prepare import admin_guard, openai_target
from tests.fuzz.servers import start_admin, start_fake_engine, start_openai

PORTS = {"admin": 19111, "openai": 19112, "engine": 19113}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="per operation and mode")
    parser.add_argument("--budget-s", type=float, default=600, help="per surface")
    parser.add_argument("--serve-s", type=float, default=0)
    args = parser.parse_args(argv)
    engine = start_fake_engine(PORTS["engine"])
    admin = start_admin(f"sqlite:///{tempfile.mkdtemp()}/registry.db", PORTS["admin"])
    openai = start_openai(f"http://127.0.0.1:{PORTS['engine']}/v1", PORTS["openai"])
    failed = False
    try:
        for name, server, prepare, skip in (
                ("admin", admin, admin_guard(admin.protected_key_id),
                 lambda label: " /admin/" not in label),
                ("openai", openai, openai_target("fake"), None)):
            started = time.monotonic()
            report = fuzz(f"{server.url}/openapi.json", server.headers, examples=args.examples,
                          budget_s=args.budget_s, prepare=prepare, skip=skip, derandomize=False)
            server_errors = sum(n for status, n in report.statuses.items() if status >= 500)
            print(f"{name}: {report.cases} cases in {time.monotonic() - started:.0f}s, "
                  f"{server_errors} server errors, {len(report.failures)} failing operations")
            print(report.summary(), flush=True)
            failed |= bool(report.failures)
        if args.serve_s:
            print(f"serving admin at {admin.url} ({admin.headers['Authorization']}) and openai "
                  f"at {openai.url} ({openai.headers['Authorization']}) for {args.serve_s:.0f}s",
                  flush=True)
            time.sleep(args.serve_s)
    finally:
        admin.stop()
        openai.stop()
        engine.terminate()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
