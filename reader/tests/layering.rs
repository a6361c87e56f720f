//! The reader's dependency rule (reader/ARCHITECTURE.md), checked on the source: the stages
//! (config, intake, deliver, sink, settle) and the shared modules below them never name the
//! exactly-once or the cluster layer; only the cluster layer names kube, and it is compiled only
//! with the `cluster` feature.
//!
//! Why a scan of the source and not of a build: a `use` that crosses the rule compiles fine; the
//! rule is about which module may know which, and that is written in the paths.

use std::path::{Path, PathBuf};

/// Top modules that must not reach the exactly-once or cluster layers.
const BELOW_THE_SEAM: &[&str] =
    &["config", "intake", "payload", "deliver", "sink", "settle", "aws", "process", "record.rs"];
const SEAM_SIDE: &[&str] = &["crate::exactly_once", "crate::cluster"];
const KUBE: &[&str] = &["kube::", "k8s_openapi", "use kube"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Code lines (comments dropped) of every file under `src/`, with the file's top module.
fn code() -> Vec<(String, PathBuf, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).expect("under src");
            let top =
                relative.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("readable source");
            let lines =
                text.lines().map(str::trim).filter(|l| !l.starts_with("//")).map(str::to_owned).collect();
            (top, relative.to_path_buf(), lines)
        })
        .collect()
}

fn offending(lines: &[String], needles: &[&str]) -> Vec<String> {
    lines.iter().filter(|l| needles.iter().any(|n| l.contains(n))).cloned().collect()
}

#[test]
fn no_stage_imports_the_exactly_once_or_cluster_layer() {
    let files = code();
    assert!(files.len() > 40, "the scan found the sources ({} files)", files.len());
    let mut broken = Vec::new();
    for (top, path, lines) in &files {
        if BELOW_THE_SEAM.contains(&top.as_str()) {
            for line in offending(lines, SEAM_SIDE) {
                broken.push(format!("{}: {line}", path.display()));
            }
        }
    }
    assert!(broken.is_empty(), "stages reaching past the gate:\n{}", broken.join("\n"));
    // The scan sees real crossings: the wiring does name the exactly-once layer.
    let run = files.iter().filter(|(top, ..)| top == "run").flat_map(|(_, _, l)| offending(l, SEAM_SIDE));
    assert!(run.count() > 0, "run/ names exactly_once, so the scan can see such lines");
}

#[test]
fn only_the_cluster_layer_names_kube_and_only_with_its_feature() {
    let files = code();
    let mut broken = Vec::new();
    let mut in_cluster = 0;
    for (top, path, lines) in &files {
        let found = offending(lines, KUBE);
        if top == "cluster" {
            in_cluster += found.len();
        } else {
            broken.extend(found.into_iter().map(|l| format!("{}: {l}", path.display())));
        }
    }
    assert!(broken.is_empty(), "kube outside cluster/:\n{}", broken.join("\n"));
    assert!(in_cluster > 0, "cluster/ names kube, so the scan can see such lines");

    let lib = code().into_iter().find(|(top, ..)| top == "lib.rs").expect("lib.rs").2;
    let gated = lib.windows(2).any(|w| w[0] == "#[cfg(feature = \"cluster\")]" && w[1] == "pub mod cluster;");
    assert!(gated, "lib.rs compiles cluster only with the cluster feature");
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    for dependency in ["kube =", "k8s-openapi ="] {
        let line = manifest.lines().find(|l| l.starts_with(dependency)).expect("declared");
        assert!(line.contains("optional = true"), "{dependency} is optional: {line}");
    }
    let defaults = manifest.lines().find(|l| l.starts_with("default = [")).expect("default features");
    assert!(defaults.contains("\"cluster\""), "the cluster feature is on by default: {defaults}");
}
