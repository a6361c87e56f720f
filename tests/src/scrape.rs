//! Reading the readers' `/metrics` from a suite: where each reader process listens, its text, and one
//! family's value out of it.
//!
//! Where: the process kubelet gives each pod's admin container port a loopback port of its own
//! (pods share the node's network here) and records it; a reader also says where it listens
//! (`sluice-reader admin listening on …`) in its log, which serves when the record has no port.

use std::collections::BTreeMap;

use crate::system::System;

/// The admin address of reader `pod`: its admin port as the kubelet recorded it, else the address it
/// printed last.
pub fn admin_addr(system: &System, pod: &str) -> Option<String> {
    let recorded = system.reader_processes().into_iter().find(|p| p.name == pod).and_then(|p| p.admin_port);
    if let Some(port) = recorded {
        return Some(format!("127.0.0.1:{port}"));
    }
    let text = std::fs::read_to_string(system.pod_log(pod)).ok()?;
    text.lines()
        .filter_map(|l| l.split("sluice-reader admin listening on ").nth(1))
        .map(|a| a.trim().to_owned())
        .next_back()
}

/// The loopback address after the last line of the log at `log` that contains `marker` (the
/// operator's `admin server listening`, say).
pub fn address_in_log(log: &std::path::Path, marker: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rfind(|l| l.contains(marker))?;
    let at = line.find("127.0.0.1:")?;
    let tail = &line[at..];
    let end = tail[10..].find(|c: char| !c.is_ascii_digit()).map_or(tail.len(), |e| e + 10);
    Some(tail[..end].to_owned())
}

/// One sample (no labels) or the sum of a family's samples from a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Each running reader of `source` with its `/metrics` text, by pod name; a reader that has not
/// said where it listens yet, or does not answer, is left out.
pub async fn readers(system: &System, http: &reqwest::Client, source: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for reader in system.running_readers(source) {
        let Some(addr) = admin_addr(system, &reader.name) else { continue };
        let Ok(response) = http.get(format!("http://{addr}/metrics")).send().await else { continue };
        if let Ok(text) = response.text().await {
            out.insert(reader.name.clone(), text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn a_family_is_summed_over_its_labels_and_a_prefix_is_not_a_match() {
        let text =
            "# HELP x_total help\nx_total{sink=\"a\"} 2\nx_total{sink=\"b\"} 3\nx_total_bytes 100\ny 1\n";
        assert_eq!(metric(text, "x_total"), Some(5.0));
        assert_eq!(metric(text, "y"), Some(1.0));
        assert_eq!(metric(text, "z"), None);
    }
}
