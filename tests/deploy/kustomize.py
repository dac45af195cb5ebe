"""Build the kustomize overlays in deploy/kubernetes/ offline and index what they create.

    objects = build("production")            # every object, as kubectl kustomize prints it
    one(objects, "Deployment", "inferplane-gateway")
"""
from __future__ import annotations

import functools
import shutil
import subprocess

import yaml

from tests.conftest import ROOT

KUBERNETES_DIR = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("dev", "production")


@functools.cache
def build(overlay: str) -> tuple[dict, ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: it builds the kustomize overlays"
    result = subprocess.run([kubectl, "kustomize", str(KUBERNETES_DIR / "overlays" / overlay)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(objects, kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind: str, name: str) -> dict:
    (found,) = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def selects(selector: dict, labels: dict) -> bool:
    """A matchLabels selector (the only form the manifests use) against pod labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


def container(workload: dict, index: int = 0) -> dict:
    return workload["spec"]["template"]["spec"]["containers"][index]
