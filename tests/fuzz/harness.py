"""Schemathesis over a running server's /openapi.json, bounded in examples and time.

    report = fuzz(schema_url, headers, examples=20, budget_s=60, prepare=hook)
    assert not report.failures, report.summary()

Every operation gets positive cases (schema-valid: must be accepted, i.e. answered 2xx or a
documented state-dependent 4xx) and negative ones (must be refused with a documented 4xx).
Checks: no server error, only documented statuses, response bodies and content types as
documented, valid data accepted. `prepare(case)` may adjust a case before it is sent (keep
the credential the fuzzer runs with from being revoked, point /v1 bodies at a served model).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, positive_data_acceptance, response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance,
          content_type_conformance, positive_data_acceptance]
# Valid data answered by something a schema cannot foresee: the registry's state (404 missing,
# 409 conflict, 422 a rule beyond the schema), rate limits, and an engine that is down.
ACCEPTED = ["2xx", "401", "403", "404", "409", "422", "429", "503"]


@dataclass
class Report:
    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)   # operation → first failure

    def summary(self) -> str:
        lines = [f"{self.cases} cases, statuses {dict(sorted(self.statuses.items()))}"]
        lines += [f"{op}: {text}" for op, text in sorted(self.failures.items())]
        return "\n".join(lines)


def load(schema_url: str, headers: dict[str, str]):
    schema = schemathesis.openapi.from_url(schema_url)
    schema.config.update(headers=headers)
    schema.config.checks.positive_data_acceptance.expected_statuses = ACCEPTED
    return schema


def fuzz(schema_url: str, headers: dict[str, str], *, examples: int, budget_s: float,
         prepare: Callable | None = None, skip: Callable[[str], bool] | None = None,
         derandomize: bool = True) -> Report:
    """derandomize: the same cases every run (the suite); False explores anew (long runs)."""
    schema = load(schema_url, headers)
    report = Report()
    operations = [r.ok() for r in schema.get_all_operations()]
    deadline = time.monotonic() + budget_s
    per_op = budget_s / max(1, 2 * len(operations))
    for operation in operations:
        if skip is not None and skip(operation.label):
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() > deadline:
                return report
            _run(operation, mode, headers, examples, min(per_op, deadline - time.monotonic()),
                 prepare, report, derandomize)
    return report


def _run(operation, mode, headers, examples, seconds, prepare, report: Report,
         derandomize: bool) -> None:
    stop_at = time.monotonic() + seconds

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case):
        if time.monotonic() > stop_at:
            return
        if prepare is not None:
            prepare(case)
        report.cases += 1
        response = case.call(headers=headers, timeout=30)
        report.statuses[response.status_code] += 1
        case.validate_response(response, checks=CHECKS)

    try:
        one()
    except Unsatisfiable:
        pass  # no negative case exists (an operation without parameters)
    except BaseException as exc:  # the first failure of this operation and mode
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        text = str(exc).strip().splitlines()
        for sub in getattr(exc, "exceptions", ()):  # a flaky or grouped failure: its causes
            text += str(sub).strip().splitlines()[:12]
        report.failures[f"{operation.label} [{mode.value}]"] = " | ".join(text[:24])
