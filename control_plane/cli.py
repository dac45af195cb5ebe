"""The `inferplane` command line."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common.vocabulary import BudgetPeriod, Priority, Role, values


def _add_server_args(p: argparse.ArgumentParser, port: int = 8000) -> None:
    p.add_argument("--config", default=os.environ.get("INFERPLANE_CONFIG"), help="YAML settings file")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)


def _settings(args: argparse.Namespace):
    from control_plane.settings import SettingsError, load_settings

    try:
        settings = load_settings(args.config)
    except SettingsError as exc:  # each bad key by its path, no traceback: exit status 1
        raise SystemExit(f"inferplane: {exc}") from None
    if getattr(args, "host", None):
        settings.host = args.host
    if getattr(args, "port", None):
        settings.port = args.port
    return settings


def _workers(text: str) -> int:
    """--workers: a whole number from 1 (argparse turns the ValueError into a usage error)."""
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {count}")
    return count


def _cmd_up(args: argparse.Namespace) -> int:
    from control_plane.up import run_up

    return run_up(_settings(args), workers=args.workers)


def _cmd_gateway(args: argparse.Namespace) -> int:
    from control_plane.up import run_gateway

    return run_gateway(_settings(args), workers=args.workers)


def _cmd_control_plane(args: argparse.Namespace) -> int:
    from control_plane.up import run_control_plane

    return run_control_plane(_settings(args))


def _cmd_engine(args: argparse.Namespace) -> int:
    from builtin_engine.cli import serve

    return serve(args)


def _cmd_db(args: argparse.Namespace) -> int:
    from registry.migrate import downgrade, upgrade

    url = _settings(args).resolved_database_url()
    Path(_settings(args).data_dir).mkdir(parents=True, exist_ok=True)
    if args.action == "upgrade":
        upgrade(url, progress=lambda msg: print(msg, file=sys.stderr))
    else:
        downgrade(url, args.revision, progress=lambda msg: print(msg, file=sys.stderr))
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    from control_plane.bootstrap import create_key_cli

    return create_key_cli(_settings(args), args)


def _cmd_mlflow(args: argparse.Namespace) -> int:
    import json

    from registry.db import make_session_factory
    from registry.mlflow_sync import MlflowSync

    settings = _settings(args)
    uri = args.tracking_uri or (settings.mlflow.tracking_uri if settings.mlflow else None)
    if not uri:
        print("give --tracking-uri or set mlflow.tracking_uri in the config", file=sys.stderr)
        return 2
    sync = MlflowSync(make_session_factory(settings.resolved_database_url()), uri,
                      prefix=settings.mlflow.prefix if settings.mlflow else "")
    print(json.dumps(sync.sync_once(args.direction).to_dict(), indent=2, default=str))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    script = Path("bench") / f"{args.scenario.replace('-', '_')}.py"
    if not script.exists():
        available = sorted(p.stem for p in Path("bench").glob("*.py") if not p.stem.startswith("_"))
        print(f"unknown benchmark {args.scenario!r}; available: {', '.join(available)}",
              file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(script), *args.rest])


def build_parser() -> argparse.ArgumentParser:
    from builtin_engine.cli import add_serve_arguments

    parser = argparse.ArgumentParser(prog="inferplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="embedded default: gateway + control plane + builtin engines")
    _add_server_args(up)
    up.add_argument("--workers", type=_workers, default=1,
                    help="gateway worker processes on the one port (the control plane runs "
                         "apart; without Redis the supervisor keeps limits and budgets exact)")
    up.set_defaults(func=_cmd_up)
    gw = sub.add_parser("gateway", help="a stateless gateway replica")
    _add_server_args(gw)
    gw.add_argument("--workers", type=int, default=1)
    gw.set_defaults(func=_cmd_gateway)
    cp = sub.add_parser("control-plane", help="admin API, console and controllers")
    _add_server_args(cp)
    cp.set_defaults(func=_cmd_control_plane)
    engine = sub.add_parser("engine", help="the built-in engine")
    engine_sub = engine.add_subparsers(dest="engine_command", required=True)
    serve = engine_sub.add_parser("serve", help="serve a model over the OpenAI API")
    add_serve_arguments(serve)
    serve.set_defaults(func=_cmd_engine)
    db = sub.add_parser("db", help="database migrations")
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("revision", nargs="?", default="-1")
    db.add_argument("--config", default=os.environ.get("INFERPLANE_CONFIG"))
    db.set_defaults(func=_cmd_db)
    keys = sub.add_parser("keys", help="API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key and print its secret once")
    create.add_argument("--name", required=True)
    create.add_argument("--role", default=Role.USER, choices=values(Role))
    create.add_argument("--team", default=None)
    create.add_argument("--models", default=None, help="comma-separated allowlist")
    create.add_argument("--rpm-limit", type=int, default=None)
    create.add_argument("--tpm-limit", type=int, default=None)
    create.add_argument("--priority", default=Priority.STANDARD, choices=values(Priority))
    create.add_argument("--max-budget", type=float, default=None, help="USD")
    create.add_argument("--budget-period", default=None, choices=values(BudgetPeriod),
                        help="reset the budget every UTC hour/day/week/month (default: never)")
    create.add_argument("--config", default=os.environ.get("INFERPLANE_CONFIG"))
    create.set_defaults(func=_cmd_keys)
    mlflow = sub.add_parser("mlflow", help="MLflow Model Registry sync")
    mlflow.add_argument("action", choices=["sync"])
    mlflow.add_argument("--direction", default="both", choices=["pull", "push", "both"])
    mlflow.add_argument("--tracking-uri", default=None)
    mlflow.add_argument("--config", default=os.environ.get("INFERPLANE_CONFIG"))
    mlflow.set_defaults(func=_cmd_mlflow)
    bench = sub.add_parser("bench", help="run a benchmark scenario from bench/")
    bench.add_argument("scenario")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
