#!/usr/bin/env python3
"""The Helm chart (deploy/helm/sluice), checked as a user receives it: the packaged chart.

    chart.py check HELM CHART_TGZ      the test command (scripts/check-helm.sh)
    chart.py release HELM CHART_TGZ VERSION
                                       the release: the same checks, and VERSION must be the chart's

What it checks, printing each result:
- versions: Cargo.toml's workspace version = Chart.yaml version = appVersion = the image tag of the
  kustomize base, of deploy/operator/ and of the EKS overlay (image, chart and manifests move together);
- `helm lint --strict` with the default values and with ci/all-on-values.yaml (every toggle on);
- `helm template` of both, every object valid as scripts/manifests.py judges the kustomize outputs
  (the Kubernetes schemas of the oldest and newest supported minor, the CRD's schema, the Prometheus
  Operator API, namespaces where they belong); and the chart's kubeVersion refuses the minor before
  the oldest supported;
- values.schema.json refuses wrong values, each with a line naming the value;
- the chart's objects equal the kustomize base's and the EKS overlay's (scripts/chart_parity.py).
Runs in the venv scripts/manifests-venv.sh makes; needs kubectl (kustomize) on PATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import chart_parity
import manifests

REPO = manifests.REPO
CHART = manifests.DEPLOY / "helm" / "sluice"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
EKS = CHART / "ci" / "eks-values.yaml"
MONITORING_ON = [
    "--set",
    "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,"
    "monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
]
#: Wrong values and the text helm's refusal must contain to name them.
REFUSED = [
    ("image: {tag: 1.2}", "/image/tag"),
    ("metrics: {port: 80800}", "/metrics/port"),
    ("logging: {format: yaml}", "/logging/format"),
    ("concurrency: {reconciles: 0}", "/concurrency/reconciles"),
    ("imagee: {tag: x}", "'imagee'"),
    ("watchNamespaces: [team-a, team-b]", "/watchNamespaces"),
    ('replicaCount: "2"', "/replicaCount"),
    ("monitoring: {serviceMonitor: {interval: 30 seconds}}", "/monitoring/serviceMonitor/interval"),
    ("serviceAccount: {annotations: {eks.amazonaws.com/role-arn: 42}}", "/serviceAccount/annotations"),
    ("replicaCount: 2\nleaderElection: {enabled: false}", "leaderElection.enabled"),
]


def say(line: str) -> None:
    print(f"chart: {line}", flush=True)


def helm(binary: str, *args: str, values: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *args], input=values, capture_output=True, text=True)


def versions() -> str:
    """The one version, or SystemExit naming each file that disagrees."""
    cargo = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    chart = manifests.load(CHART / "Chart.yaml")[0]
    found = {
        "Cargo.toml [workspace.package] version": cargo,
        "deploy/helm/sluice/Chart.yaml version": chart["version"],
        "deploy/helm/sluice/Chart.yaml appVersion": str(chart["appVersion"]),
    }
    for path in ("deploy/kustomize/kustomization.yaml", "deploy/overlays/eks/kustomization.yaml"):
        for image in manifests.load(REPO / path)[0].get("images", []):
            found[f"{path} images[{image['name']}].newTag"] = str(image.get("newTag"))
    deployment = manifests.load(REPO / "deploy/operator/deployment.yaml")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    found["deploy/operator/deployment.yaml image"] = container["image"].rsplit(":", 1)[-1]
    for env in container.get("env", []):
        if env["name"] == "SLUICE_READER_IMAGE":
            found["deploy/operator/deployment.yaml SLUICE_READER_IMAGE"] = env["value"].rsplit(":", 1)[-1]
    wrong = [f"{where} is {value}" for where, value in found.items() if value != cargo]
    if wrong:
        raise SystemExit(f"chart: versions differ from Cargo.toml's {cargo}: " + "; ".join(wrong))
    say(f"versions: {cargo} in all {len(found)} places (Cargo.toml, Chart.yaml version and appVersion, image tags)")
    return cargo


def lint(binary: str, tgz: str) -> None:
    for label, extra in (("default values", []), (ALL_ON.name, ["-f", str(ALL_ON)])):
        out = helm(binary, "lint", "--strict", tgz, *extra)
        text = (out.stdout + out.stderr).strip()
        if out.returncode != 0:
            raise SystemExit(f"chart: helm lint --strict ({label}) failed:\n{text}")
        notes = [line.strip() for line in text.splitlines() if line.strip().startswith("[")]
        summary = text.splitlines()[-1]
        say(f"helm lint --strict ({label}): {summary}" + (f"; {'; '.join(notes)}" if notes else ""))


def render(binary: str, tgz: str, namespace: str, *args: str) -> list[dict]:
    newest = manifests.KUBERNETES_VERSIONS[-1]
    out = helm(binary, "template", "sluice", tgz, "--namespace", namespace, "--kube-version", f"{newest}.0", *args)
    if out.returncode != 0:
        raise SystemExit(f"chart: helm template {' '.join(args)} failed:\n{out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def validate(binary: str, tgz: str) -> None:
    for label, args in (("default values", []), (ALL_ON.name, ["-f", str(ALL_ON)])):
        checker = manifests.Checker()
        docs = render(binary, tgz, "sluice-system", *args)
        for doc in docs:
            checker.document(f"helm template ({label})", doc, namespaced_output=True)
        kinds = sorted({d["kind"] for d in docs})
        manifests.report(checker, f"helm template with {label} ({', '.join(kinds)})")
    oldest = manifests.KUBERNETES_VERSIONS[0]
    major, minor = oldest.split(".")
    before = f"{major}.{int(minor) - 1}.0"
    out = helm(binary, "template", "sluice", tgz, "--kube-version", before)
    if out.returncode == 0:
        raise SystemExit(f"chart: Chart.yaml kubeVersion accepts Kubernetes {before}, below the oldest supported {oldest}")
    say(f"kubeVersion: Kubernetes {before} refused, {oldest} to {manifests.KUBERNETES_VERSIONS[-1]} rendered")


def refusals(binary: str, tgz: str) -> None:
    for values, names in REFUSED:
        out = helm(binary, "template", "sluice", tgz, "-f", "-", values=values + "\n")
        lines = [line.strip() for line in out.stderr.splitlines() if names in line]
        shown = values.replace("\n", ", ")
        if out.returncode == 0 or not lines:
            raise SystemExit(f"chart: values {shown!r} should be refused with a line naming {names}; helm said:\n{out.stderr}")
        say(f"refused {shown}: {lines[0]}")


def parity(binary: str, tgz: str) -> None:
    crds = [d for p in sorted((manifests.DEPLOY / "crds").glob("*.yaml")) for d in manifests.load(p)]
    pairs = [
        (
            "kustomize base vs chart (defaults, monitoring on), namespace sluice-system",
            ["kustomize", "monitoring", "observability"],
            render(binary, tgz, "sluice-system", *MONITORING_ON),
        ),
        (
            "EKS overlay vs chart (ci/eks-values.yaml, monitoring on), namespace sluice",
            ["overlays/eks", "overlays/eks/monitoring"],
            render(binary, tgz, "sluice", "-f", str(EKS), *MONITORING_ON),
        ),
    ]
    problems = []
    for title, directories, charted in pairs:
        kustomized = crds + [d for directory in directories for d in manifests.kustomize(manifests.DEPLOY / directory)]
        lines, found = chart_parity.compare(title, kustomized, charted)
        print("\n".join(f"chart: {line}" for line in lines), flush=True)
        problems += found
    if problems:
        print("\n".join(f"chart: {p}" for p in problems), file=sys.stderr)
        raise SystemExit(f"chart: {len(problems)} differences between the chart and kustomize (above)")


def main() -> None:
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "check":
        binary, tgz = args[1:]
        versions()
    elif len(args) == 4 and args[0] == "release":
        binary, tgz, version = args[1:]
        found = versions()
        if found != version:
            raise SystemExit(f"chart: releasing {version}, but the workspace, chart and images say {found}")
    else:
        raise SystemExit("usage: chart.py check HELM CHART_TGZ | chart.py release HELM CHART_TGZ VERSION")
    lint(binary, tgz)
    validate(binary, tgz)
    refusals(binary, tgz)
    parity(binary, tgz)


if __name__ == "__main__":
    os.chdir(REPO)
    main()
