"""Generate the Grafana dashboards in dashboards/*.json.

    python dashboards/build.py          # rewrite the JSON files
    python dashboards/build.py --check  # exit 1 if the committed JSON is stale
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # shared vocabularies (gateway.*)

import engine_fleet  # noqa: E402
import gateway_overview  # noqa: E402
import rollouts  # noqa: E402
import slo  # noqa: E402

HERE = Path(__file__).resolve().parent
DASHBOARDS = {
    "gateway-overview.json": gateway_overview.build,
    "engine-fleet.json": engine_fleet.build,
    "slo.json": slo.build,
    "rollouts.json": rollouts.build,
}


def render() -> dict[str, str]:
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run python dashboards/build.py): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
