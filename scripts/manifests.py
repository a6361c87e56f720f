#!/usr/bin/env python3
"""Every manifest Sluice ships, rendered as a user renders it and judged offline as an API server would.

    manifests.py check                       render and validate everything (the test command)
    manifests.py release VERSION IMAGE OUT   write OUT/sluice-VERSION-install.yaml (CRD, operator,
                                             admission policy) and OUT/sluice-VERSION-monitoring.yaml
                                             (ServiceMonitor, PodMonitor, PrometheusRule, dashboard),
                                             validated the same way (the release workflow)

What is rendered: `kubectl kustomize` of every directory under deploy/ with a kustomization.yaml
(found, not listed, so a new one cannot be forgotten), the CRDs of deploy/crds/, every example under
deploy/examples/, and the two release bundles. What each object is judged against:
- built-in kinds: the upstream Kubernetes JSON schemas of PyPI kubernetes-validate, strict (unknown
  fields refused), for the oldest and the newest Kubernetes minor Sluice supports (docs/requirements.md);
- SqsSource: the CRD's own openAPIV3Schema (deploy/crds/), unknown fields refused as `kubectl apply`
  refuses them by default; the CEL rules are judged by the Rust tests (crds/tests/), not here;
- ServiceMonitor, PodMonitor, PrometheusRule: the Prometheus Operator's API as generated from its
  upstream CRDs (PyPI cloudcoil-models-prometheus-operator), unknown fields refused;
- every object: a cluster-scoped kind carries no namespace, and a namespaced object of a kustomize
  output carries one (the install namespace).
Runs in the venv scripts/check-manifests.sh makes; needs kubectl (kustomize 5) on PATH.
"""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
import kubernetes_validate.utils
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator

# kubernetes-validate parses a schema file, and its large _definitions.json, on every call: read each
# once (the parsed schemas are only read, never changed).
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
#: The oldest and newest Kubernetes minors Sluice supports (docs/requirements.md, "Kubernetes versions"). The oldest
#: is the first with ValidatingAdmissionPolicy v1, which deploy/policy/ needs.
KUBERNETES_VERSIONS = ("1.30", "1.37")
#: Kustomize directories that are not installs (a transformer to list under `transformers:`).
NOT_INSTALLS = {DEPLOY / "cluster-scoped"}
#: The cluster-scoped kinds Sluice ships; any other kind is namespaced.
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
PROMETHEUS_OPERATOR_KINDS = {
    "ServiceMonitor": prometheus_operator.ServiceMonitor,
    "PodMonitor": prometheus_operator.PodMonitor,
    "PrometheusRule": prometheus_operator.PrometheusRule,
}


def kustomize(directory: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"manifests: kubectl kustomize {directory} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> JSON Schema, from every CRD under deploy/crds/."""
    schemas = {}
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        for crd in load(path):
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = json_schema(version["schema"]["openAPIV3Schema"])
                # The API server gives every object these, whether the schema names them or not.
                schema.setdefault("properties", {})
                schema["properties"].setdefault("apiVersion", {"type": "string"})
                schema["properties"].setdefault("kind", {"type": "string"})
                schema["properties"].setdefault("metadata", {"type": "object"})
                schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def json_schema(node):
    """A structural OpenAPI v3 schema as JSON Schema, with the API server's reading of it: unknown
    fields refused (unless preserved), int-or-string and nullable honoured, CEL rules left out."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-validations")}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = out.get("x-kubernetes-preserve-unknown-fields", False)
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def unknown_keys(given, known, path="") -> list[str]:
    """Keys of `given` that a model round trip (`known`) dropped: fields the API does not have."""
    found = []
    if isinstance(given, dict) and isinstance(known, dict):
        for key, value in given.items():
            if key not in known:
                found.append(f"{path}.{key}".lstrip("."))
            else:
                found += unknown_keys(value, known[key], f"{path}.{key}")
    elif isinstance(given, list) and isinstance(known, list):
        for i, (g, k) in enumerate(zip(given, known)):
            found += unknown_keys(g, k, f"{path}[{i}]")
    return found


class Checker:
    def __init__(self):
        self.crds = crd_schemas()
        self.errors: list[str] = []
        self.checked = 0

    def fail(self, origin: str, doc: dict, message: str) -> None:
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        self.errors.append(f"{origin}: {name}: {message}")

    def document(self, origin: str, doc: dict, namespaced_output: bool) -> None:
        self.checked += 1
        kind, namespace = doc.get("kind", ""), doc.get("metadata", {}).get("namespace")
        if kind in CLUSTER_SCOPED and namespace is not None:
            self.fail(origin, doc, f"cluster-scoped, but carries namespace {namespace!r}")
        if namespaced_output and kind not in CLUSTER_SCOPED and not namespace:
            self.fail(origin, doc, "namespaced, but has no namespace (it would land in the client's)")
        if (doc.get("apiVersion"), kind) in self.crds:
            self.custom_resource(origin, doc)
        elif kind in PROMETHEUS_OPERATOR_KINDS:
            self.prometheus_operator(origin, doc)
        else:
            self.builtin(origin, doc)

    def builtin(self, origin: str, doc: dict) -> None:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path) or "(top)"
                self.fail(origin, doc, f"Kubernetes {version}: at {where}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                self.fail(origin, doc, f"Kubernetes {version} has no {doc.get('apiVersion')} {doc.get('kind')}")

    def custom_resource(self, origin: str, doc: dict) -> None:
        schema = self.crds[(doc["apiVersion"], doc["kind"])]
        for e in jsonschema.Draft7Validator(schema).iter_errors(doc):
            where = "/".join(str(p) for p in e.path) or "(top)"
            self.fail(origin, doc, f"CRD schema: at {where}: {e.message}")

    def prometheus_operator(self, origin: str, doc: dict) -> None:
        model = PROMETHEUS_OPERATOR_KINDS[doc["kind"]]
        try:
            parsed = model.model_validate(doc)
        except Exception as e:  # pydantic's ValidationError lists every field at fault
            self.fail(origin, doc, f"Prometheus Operator API: {e}")
            return
        known = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
        for key in unknown_keys(doc, known):
            self.fail(origin, doc, f"Prometheus Operator API: unknown field {key}")


def kustomizations() -> list[Path]:
    found = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
    return [d for d in found if d not in NOT_INSTALLS]


def release_bundles(version: str, image: str, out: Path) -> dict[str, Path]:
    """The install and monitoring manifests of a release, rendered by kustomize from deploy/."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", version)
    bundles = {
        "install": (
            ["crds", str(DEPLOY / "kustomize")],
            {"images": [{"name": "ghcr.io/sluice-dev/sluice", "newName": name, "newTag": tag}]},
        ),
        "monitoring": ([str(DEPLOY / "monitoring"), str(DEPLOY / "observability")], {}),
    }
    written = {}
    out.mkdir(parents=True, exist_ok=True)
    for bundle, (resources, extra) in bundles.items():
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            if "crds" in resources:
                (tmp / "crds").mkdir()
                for crd in sorted((DEPLOY / "crds").glob("*.yaml")):
                    (tmp / "crds" / crd.name).write_text(crd.read_text())
                (tmp / "crds" / "kustomization.yaml").write_text(
                    yaml.safe_dump({"resources": sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml"))})
                )
            kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
            # kustomize refuses absolute roots: name the deploy/ directories relative to this one.
            relative = [r if r == "crds" else os.path.relpath(r, tmp) for r in resources]
            kustomization |= {"resources": relative, "labels": release_labels(version)} | extra
            (tmp / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
            docs = kustomize(tmp)
        path = out / f"sluice-{version}-{bundle}.yaml"
        header = f"# Sluice {version}: {bundle} manifest, rendered by kustomize from deploy/ (scripts/manifests.py)\n"
        path.write_text(header + yaml.safe_dump_all(docs, sort_keys=False))
        written[bundle] = path
    return written


def release_labels(version: str) -> list[dict]:
    return [{"pairs": {"app.kubernetes.io/part-of": "sluice", "app.kubernetes.io/version": version}}]


def check_bundles(checker: Checker, version: str, image: str, out: Path) -> dict[str, Path]:
    written = release_bundles(version, image, out)
    for bundle, path in written.items():
        for doc in load(path):
            checker.document(f"release {path.name}", doc, namespaced_output=True)
    return written


def report(checker: Checker, what: str) -> None:
    if checker.errors:
        print("\n".join(f"manifests: {e}" for e in checker.errors), file=sys.stderr)
        raise SystemExit(f"manifests: {len(checker.errors)} problems in {what} (above)")
    versions = " and ".join(KUBERNETES_VERSIONS)
    print(f"manifests: {checker.checked} objects of {what} valid (Kubernetes {versions}, CRD, Prometheus Operator)")


def check() -> None:
    checker = Checker()
    dirs = kustomizations()
    for directory in dirs:
        for doc in kustomize(directory):
            checker.document(f"kubectl kustomize {directory.relative_to(REPO)}", doc, namespaced_output=True)
    plain = sorted((DEPLOY / "crds").glob("*.yaml")) + sorted((DEPLOY / "examples").rglob("*.yaml"))
    for path in plain:
        for doc in load(path):
            checker.document(str(path.relative_to(REPO)), doc, namespaced_output=False)
    with tempfile.TemporaryDirectory() as tmp:
        check_bundles(checker, "0.0.0-check", "ghcr.io/sluice-dev/sluice:0.0.0-check", Path(tmp))
    names = ", ".join(str(d.relative_to(DEPLOY)) for d in dirs)
    report(checker, f"{len(dirs)} kustomize outputs ({names}), {len(plain)} files and 2 release bundles")


def release(version: str, image: str, out: str) -> None:
    checker = Checker()
    written = check_bundles(checker, version, image, Path(out))
    report(checker, "the release bundles")
    for path in written.values():
        print(path)


def main() -> None:
    args = sys.argv[1:]
    if args == ["check"]:
        check()
    elif len(args) == 4 and args[0] == "release":
        release(*args[1:])
    else:
        raise SystemExit("usage: manifests.py check | manifests.py release VERSION IMAGE OUT_DIR")


if __name__ == "__main__":
    os.chdir(REPO)
    main()
