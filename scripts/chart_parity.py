"""The chart and the kustomize manifests install the same objects: compared object by object.

The chart reads its data (CRD, RBAC rules, admission policy, monitors, alerts, dashboard) from the
same files as kustomize (its files/ links to deploy/), and writes the rest (Deployment,
ServiceAccount, bindings, Service, PDB) from values. This compares both renders as an API server
would receive them, so a default value or a template that drifts from deploy/ fails the check:

- the same set of (kind, name, namespace), apart from the differences that are by design (DESIGN
  below, each with its reason, printed);
- every label and annotation kustomize sets, with the same value; the chart may add Helm's own
  (HELM_LABELS, HELM_ANNOTATIONS) and nothing else;
- everything else (spec, rules, roleRef, subjects, data...) equal, field for field, after the one
  normalisation that is by design: the kustomize base's settings ConfigMap (envFrom) is read into
  the Deployment's env, which is where the chart puts RUST_LOG and SLUICE_NAMESPACE. Text that
  spans lines is compared with runs of whitespace collapsed: kustomize writes a folded CEL
  expression back with a blank line that PyYAML reads as one more newline (no meaning in CEL).
"""

from __future__ import annotations

HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "helm.sh/chart",
}
HELM_ANNOTATIONS = {"helm.sh/resource-policy"}
#: Objects only kustomize renders, and why the chart does not.
DESIGN = {
    "Namespace": "the release namespace: `helm install --create-namespace` makes it (the chart's README "
    "says to label it pod-security.kubernetes.io/enforce=restricted, as the kustomize base does)",
}
SETTINGS = "sluice-operator-settings"


def key(doc: dict) -> tuple[str, str, str]:
    meta = doc.get("metadata", {})
    return doc.get("kind", ""), meta.get("name", ""), meta.get("namespace", "")


def show(k: tuple[str, str, str]) -> str:
    kind, name, namespace = k
    return f"{kind}/{name}" + (f" ({namespace})" if namespace else "")


def fold_settings(docs: list[dict]) -> tuple[list[dict], list[str]]:
    """The kustomize base's envFrom ConfigMaps, read into the env of the containers that name them."""
    config_maps = {key(d)[1:]: d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].startswith(SETTINGS)}
    notes, used = [], set()
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        namespace = doc["metadata"].get("namespace", "")
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for source in container.pop("envFrom", []):
                ref = source.get("configMapRef", {}).get("name", "")
                found = config_maps.get((ref, namespace))
                if found is None:
                    raise SystemExit(f"chart parity: {show(key(doc))} reads ConfigMap {ref}, which kustomize does not render")
                container.setdefault("env", []).extend({"name": k, "value": v} for k, v in found.get("data", {}).items())
                used.add((ref, namespace))
                notes.append(f"{show(key(found))} folded into {show(key(doc))} env ({', '.join(found.get('data', {}))})")
    return [d for d in docs if key(d)[1:] not in used or d.get("kind") != "ConfigMap"], notes


def differences(a, b, path: str = "") -> list[str]:
    """Where two parsed objects differ, as `path: kustomize X, chart Y` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}" if path else k
            if k not in b:
                out.append(f"{sub}: only kustomize sets it ({a[k]!r})"[:300])
            elif k not in a:
                out.append(f"{sub}: only the chart sets it ({b[k]!r})"[:300])
            else:
                out += differences(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, str) and isinstance(b, str) and "\n" in a + b and a.split() == b.split():
        return []
    return [] if a == b else [f"{path}: kustomize {a!r}, chart {b!r}"[:300]]


def metadata_problems(kustomized: dict, charted: dict, field: str, allowed: set[str]) -> list[str]:
    mine = kustomized.get("metadata", {}).get(field) or {}
    theirs = charted.get("metadata", {}).get(field) or {}
    out = [f"metadata.{field}.{k}: kustomize {v!r}, chart {theirs.get(k)!r}" for k, v in mine.items() if theirs.get(k) != v]
    out += [f"metadata.{field}.{k}: only the chart sets it" for k in theirs if k not in mine and k not in allowed]
    return out


def without_metadata_maps(doc: dict) -> dict:
    out = dict(doc)
    out["metadata"] = {k: v for k, v in doc.get("metadata", {}).items() if k not in ("labels", "annotations")}
    return out


def highlights(doc: dict) -> str:
    """What was compared of the fields that matter most, for the printout."""
    kind = doc.get("kind")
    if kind in ("ClusterRole", "Role"):
        return f"{len(doc.get('rules', []))} rules"
    if kind == "Deployment":
        container = doc["spec"]["template"]["spec"]["containers"][0]
        env = ", ".join(e["name"] for e in container.get("env", []))
        return f"replicas {doc['spec'].get('replicas')}, image {container['image']}, args {' '.join(container.get('args', []))}, env {env}"
    if kind == "ValidatingAdmissionPolicy":
        return f"{len(doc['spec'].get('validations', []))} validations, {len(doc['spec'].get('variables', []))} variables"
    if kind == "CustomResourceDefinition":
        return f"versions {', '.join(v['name'] for v in doc['spec']['versions'])}"
    if kind == "PrometheusRule":
        return f"{sum(len(g.get('rules', [])) for g in doc['spec']['groups'])} rules"
    if kind == "ConfigMap":
        return ", ".join(f"{k} {len(v)} bytes" for k, v in doc.get("data", {}).items())
    if kind in ("ClusterRoleBinding", "RoleBinding"):
        return "subjects " + ", ".join(f"{s.get('namespace', '')}/{s['name']}" for s in doc.get("subjects", []))
    if kind == "ServiceAccount":
        return "annotations " + (", ".join(doc["metadata"].get("annotations") or {}) or "none")
    return ""


def compare(title: str, kustomized: list[dict], charted: list[dict]) -> tuple[list[str], list[str]]:
    """(lines to print, problems) for one pair of renders."""
    kustomized, notes = fold_settings(kustomized)
    lines, problems = [f"{title}:"], []
    ours = {key(d): d for d in kustomized}
    theirs = {key(d): d for d in charted}
    for k in sorted(set(ours) | set(theirs)):
        if k not in theirs:
            if k[0] in DESIGN:
                lines.append(f"  ~ {show(k)}: kustomize only, by design: {DESIGN[k[0]]}")
            else:
                problems.append(f"{title}: {show(k)}: kustomize renders it, the chart does not")
            continue
        if k not in ours:
            problems.append(f"{title}: {show(k)}: the chart renders it, kustomize does not")
            continue
        a, b = ours[k], theirs[k]
        found = metadata_problems(a, b, "labels", HELM_LABELS) + metadata_problems(a, b, "annotations", HELM_ANNOTATIONS)
        found += differences(without_metadata_maps(a), without_metadata_maps(b))
        problems += [f"{title}: {show(k)}: {f}" for f in found]
        mark = "=" if not found else "!"
        detail = highlights(b)
        lines.append(f"  {mark} {show(k)}" + (f": {detail}" if detail else ""))
    lines += [f"  ~ {n}" for n in notes]
    same = sum(1 for line in lines if line.startswith("  ="))
    lines.append(f"  {same} objects identical (labels: the chart adds only {', '.join(sorted(HELM_LABELS))})")
    return lines, problems
