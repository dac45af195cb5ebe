"""Small builders for Grafana dashboard JSON (schemaVersion 39).

Every panel queries the `${datasource}` variable, so the dashboards import into
any Grafana without editing datasource uids, and every panel must be given a
unit and a description: the builders make both required arguments.
"""
from __future__ import annotations

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
RATE = "$__rate_interval"  # adapts to the scrape interval, never shorter than 4 scrapes


def target(expr: str, legend: str = "", instant: bool = False, table: bool = False) -> dict:
    out = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto",
           "range": not instant, "instant": instant}
    if table:
        out["format"] = "table"
    return out


def quantiles(histogram: str, selector: str, by: str = "", qs=(0.5, 0.95, 0.99),
              name: str = "") -> list[dict]:
    """P50/P95/P99 targets of a Prometheus histogram, grouped by `by` labels."""
    group = f"le, {by}" if by else "le"
    suffix = " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(",") if label.strip())
    return [
        target(f"histogram_quantile({q}, sum by ({group}) "
               f"(rate({histogram}_bucket{{{selector}}}[{RATE}])))",
               f"{name} P{int(q * 100)} {suffix}".strip())
        for q in qs
    ]


def _panel(kind: str, title: str, description: str, unit: str, targets: list[dict],
           width: int, height: int, field_defaults: dict | None = None,
           options: dict | None = None) -> dict:
    for ref, tgt in enumerate(targets):
        tgt["refId"] = chr(ord("A") + ref)
    defaults = {"unit": unit, **(field_defaults or {})}
    return {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"w": width, "h": height, "x": 0, "y": 0},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options or {}, "targets": targets,
    }


def timeseries(title: str, description: str, unit: str, targets: list[dict], width: int = 12,
               height: int = 8, stack: bool = False, min_value: float | None = None,
               max_value: float | None = None, thresholds: list[tuple[float, str]] | None = None,
               ) -> dict:
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    defaults: dict = {"custom": custom}
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    if thresholds:
        defaults["thresholds"] = _thresholds(thresholds)
        custom["thresholdsStyle"] = {"mode": "dashed"}
    options = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return _panel("timeseries", title, description, unit, targets, width, height, defaults, options)


def stat(title: str, description: str, unit: str, targets: list[dict], width: int = 6,
         height: int = 5, thresholds: list[tuple[float, str]] | None = None,
         mappings: list[dict] | None = None) -> dict:
    defaults: dict = {"thresholds": _thresholds(thresholds or [(0, "green")])}
    if mappings:
        defaults["mappings"] = mappings
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
               "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    return _panel("stat", title, description, unit, targets, width, height, defaults, options)


def state_timeline(title: str, description: str, targets: list[dict], mappings: list[dict],
                   width: int = 24, height: int = 6) -> dict:
    options = {"showValue": "auto", "mergeValues": True, "rowHeight": 0.8,
               "legend": {"displayMode": "list", "placement": "bottom"}}
    return _panel("state-timeline", title, description, "none", targets, width, height,
                  {"mappings": mappings, "thresholds": _thresholds([(0, "green")])}, options)


def table(title: str, description: str, unit: str, targets: list[dict], width: int = 24,
          height: int = 6) -> dict:
    options = {"showHeader": True, "cellHeight": "sm"}
    return _panel("table", title, description, unit, targets, width, height, None, options)


def value_mappings(names: dict[int, tuple[str, str]]) -> list[dict]:
    """{value: (text, color)} -> a Grafana value mapping."""
    return [{"type": "value", "options": {
        str(value): {"text": text, "color": color, "index": i}
        for i, (value, (text, color)) in enumerate(sorted(names.items()))}}]


def _thresholds(steps: list[tuple[float, str]]) -> dict:
    out = [{"color": steps[0][1], "value": None}]
    out += [{"color": color, "value": value} for value, color in steps[1:]]
    return {"mode": "absolute", "steps": out}


def datasource_variable() -> dict:
    return {"type": "datasource", "name": "datasource", "label": "Data source",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
            "options": []}


def query_variable(name: str, label: str, query: str, default: str | None = None,
                   multi: bool = True) -> dict:
    """A label_values() variable; multi-select ones offer All (matched as `.*`)."""
    current = {"selected": True, "text": default, "value": default} if default else {}
    out = {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
           "query": query, "definition": query, "refresh": 2, "sort": 1, "hide": 0,
           "multi": multi, "includeAll": multi, "current": current, "options": [], "regex": ""}
    if multi:
        out["allValue"] = ".*"
    return out


def layout(panels: list[dict]) -> list[dict]:
    """Place panels left to right, wrapping rows on the 24-column grid; number them."""
    x = y = row_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        grid = panel["gridPos"]
        if x + grid["w"] > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        grid["x"], grid["y"] = x, y
        x += grid["w"]
        row_height = max(row_height, grid["h"])
        panel["id"] = panel_id
    return panels


def dashboard(uid: str, title: str, description: str, variables: list[dict],
              panels: list[dict], tags: tuple[str, ...] = ()) -> dict:
    return {
        "uid": uid, "title": title, "description": description,
        "tags": ["inferplane", *tags], "schemaVersion": SCHEMA_VERSION, "version": 1,
        "editable": True, "graphTooltip": 1, "timezone": "browser", "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(panels),
    }
