//! Reading the readers' `/metrics` from a suite: where each reader process listens, its text, and one
//! family's value out of it.
//!
//! Why from the log: the process runner rewrites `--admin-addr` to port 0, so each reader says where
//! it listens (`sluice-reader admin listening on …`) in its log, and that line is the only record.

use std::collections::BTreeMap;

use crate::system::System;

/// The admin address reader `pod` printed last.
pub fn admin_addr(system: &System, pod: &str) -> Option<String> {
    let log = system.state_dir().join(format!("localcp/logs/{pod}.log"));
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter_map(|l| l.split("sluice-reader admin listening on ").nth(1))
        .map(|a| a.trim().to_owned())
        .next_back()
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
