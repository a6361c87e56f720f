//! The reader's dependency rule (reader/ARCHITECTURE.md), checked on the source: the stages
//! (config, intake, payload, deliver, sink, settle) and the shared modules below them never name
//! the exactly-once or the cluster layer; nothing below the stages names a stage; the stages
//! import each other one way only (no circle); `exactly_once` names only settle's seam; only the
//! cluster layer names kube, and it is compiled only with the `cluster` feature.
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

/// The shared modules every stage stands on.
const BOTTOM: &[&str] = &["config", "process", "aws", "record.rs"];
const STAGES: &[&str] = &[
    "crate::intake",
    "crate::payload",
    "crate::settle",
    "crate::deliver",
    "crate::sink",
    "crate::run",
    "crate::exactly_once",
    "crate::cluster",
];

/// The code of a file up to its test module: a unit test may build its fixtures from a stage.
fn before_tests(lines: &[String]) -> &[String] {
    let end = lines.iter().position(|l| l == "#[cfg(test)]").unwrap_or(lines.len());
    &lines[..end]
}

#[test]
fn nothing_below_the_stages_imports_a_stage() {
    let files = code();
    let mut broken = Vec::new();
    let mut seen = 0;
    for (top, path, lines) in &files {
        if BOTTOM.contains(&top.as_str()) {
            seen += 1;
            for line in offending(before_tests(lines), STAGES) {
                broken.push(format!("{}: {line}", path.display()));
            }
        }
    }
    assert!(seen > 10, "the scan found the shared modules ({seen} files)");
    assert!(broken.is_empty(), "shared modules reaching up into a stage:\n{}", broken.join("\n"));
    // The scan sees real crossings: a stage does name the others.
    let intake = files.iter().filter(|(top, ..)| top == "intake").flat_map(|(_, _, l)| offending(l, STAGES));
    assert!(intake.count() > 0, "intake/ names settle, so the scan can see such lines");
}

/// The stages, each a top folder of `src/`.
const STAGE_NAMES: &[&str] = &["intake", "payload", "deliver", "sink", "settle"];

/// Which stage names which in its non-test code: `(from, to)` for every `crate::to` a file of
/// `from` names (a `*_tests.rs` file and a file's test module may build fixtures from any stage).
fn stage_arrows(files: &[(String, PathBuf, Vec<String>)]) -> Vec<(String, String)> {
    let mut arrows = Vec::new();
    for (top, path, lines) in files {
        let is_test_file = path.file_name().is_some_and(|n| n.to_string_lossy().ends_with("_tests.rs"));
        if !STAGE_NAMES.contains(&top.as_str()) || is_test_file {
            continue;
        }
        for line in before_tests(lines) {
            for to in STAGE_NAMES.iter().filter(|to| **to != top) {
                let named = line.match_indices(&format!("crate::{to}")).any(|(at, needle)| {
                    let next = line[at + needle.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if named && !arrows.contains(&(top.clone(), (*to).to_owned())) {
                    arrows.push((top.clone(), (*to).to_owned()));
                }
            }
        }
    }
    arrows.sort();
    arrows
}

/// A cycle in `arrows`, as the stages along it, if there is one.
fn cycle(arrows: &[(String, String)]) -> Option<Vec<String>> {
    fn walk(at: &str, arrows: &[(String, String)], path: &mut Vec<String>) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == at) {
            let mut found = path[start..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        path.push(at.to_owned());
        for (_, to) in arrows.iter().filter(|(from, _)| from == at) {
            if let Some(found) = walk(to, arrows, path) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    STAGE_NAMES.iter().find_map(|stage| walk(stage, arrows, &mut Vec::new()))
}

/// The stages' imports run one way (reader/ARCHITECTURE.md, "The dependency rule"): no two stages
/// name each other, directly or through others.
#[test]
fn the_stages_import_each_other_one_way_only() {
    let arrows = stage_arrows(&code());
    assert!(arrows.len() >= 5, "the scan found the stages' imports: {arrows:?}");
    assert_eq!(cycle(&arrows), None, "the stages import each other in a circle; arrows: {arrows:?}");
    // The check sees a circle where there is one.
    let mut back = arrows.clone();
    back.push(("payload".to_owned(), "intake".to_owned()));
    assert!(cycle(&back).is_some(), "payload -> intake closes a circle with intake -> payload");
}

/// What `settle` shows the exactly-once layer: the gate, its decisions, the tag, and the epoch
/// steps. Anything else (the ledger, the acker, the pipeline) is settle's own.
const SETTLE_SEAM: &[&str] = &["Gate", "Decision", "Tag", "EpochSettle", "Deleted"];
const SETTLE_INTERNALS: &[&str] = &["Pipeline", "Ledger", "Acker", "Ticket", "Receipt", "lock_ledger"];

/// The names a line imports from `crate::settle` (`crate::settle::X` or `crate::settle::{X, Y}`).
fn settle_names(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in line.match_indices("crate::settle") {
        let rest = &line[at + "crate::settle".len()..];
        let Some(rest) = rest.strip_prefix("::") else {
            names.push("settle".to_owned());
            continue;
        };
        let list = match rest.strip_prefix('{') {
            Some(inner) => inner.split('}').next().unwrap_or_default(),
            None => rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or_default(),
        };
        names.extend(list.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()));
    }
    names
}

#[test]
fn exactly_once_names_only_the_settle_seam() {
    let files = code();
    let mut broken = Vec::new();
    let mut seam = 0;
    for (top, path, lines) in &files {
        if top != "exactly_once" {
            continue;
        }
        for line in lines {
            for name in settle_names(line) {
                if SETTLE_SEAM.contains(&name.as_str()) {
                    seam += 1;
                } else {
                    broken.push(format!("{}: `{name}` in {line}", path.display()));
                }
            }
            let words: Vec<&str> = line.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
            for internal in SETTLE_INTERNALS {
                if words.contains(internal) {
                    broken.push(format!("{}: `{internal}` in {line}", path.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "exactly_once reaching into settle past its trait:\n{}", broken.join("\n"));
    assert!(seam > 0, "exactly_once names the seam, so the scan can see such lines");
    assert_eq!(settle_names("use crate::settle::{Gate, ledger::Tag};"), ["Gate", "ledger::Tag"]);
}

/// The protocol crate has one name, `sluice_protocol`: the API crate does not re-export it under
/// another, and nothing in the workspace uses such an alias.
#[test]
fn the_protocol_has_no_checkpoint_alias() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut files = Vec::new();
    for member in ["crds", "operator", "reader", "tests", "protocol", "logs", "aws"] {
        for folder in ["src", "tests", "examples", "benches"] {
            let dir = root.join(member).join(folder);
            if dir.is_dir() {
                sources(&dir, &mut files);
            }
        }
    }
    assert!(files.len() > 100, "the scan found the workspace's sources ({} files)", files.len());
    // Spelled in pieces, so this file does not match itself.
    let needles = [["sluice_protocol", " as "].concat(), ["sluice_crds", "::checkpoint"].concat()];
    let mut broken = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable source");
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                broken.push(format!("{}: {line}", path.display()));
            }
        }
    }
    assert!(broken.is_empty(), "the protocol under another name:\n{}", broken.join("\n"));
}
