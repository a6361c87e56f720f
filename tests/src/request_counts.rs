//! The API server's own count of the requests it served (`apiserver_request_total` on its
//! `/metrics`), by verb and resource, for benchmarks that report what a fleet of sources costs the
//! control plane.
//!
//! Why the API server's figure and not the client's: it counts every client (the operator, the
//! controller manager, the kubelet) the same way, so a change in the operator shows against the
//! rest of the cluster.

use std::collections::BTreeMap;

/// Requests served so far, by (verb, resource): the resource as `group/resource/subresource`
/// without empty parts (`apps/deployments`, `sluice.dev/sqssources/status`, `configmaps`).
pub type RequestCounts = BTreeMap<(String, String), f64>;

/// Sums `apiserver_request_total` over codes and scopes, from the text of `/metrics`.
pub fn parse(metrics: &str) -> RequestCounts {
    by_verb_and_resource(metrics, "apiserver_request_total")
}

/// Sums `apiserver_request_duration_seconds_sum` over scopes: the seconds the API server spent
/// answering, by verb and resource (a watch counts its whole life: leave `WATCH` out).
pub fn seconds(metrics: &str) -> RequestCounts {
    by_verb_and_resource(metrics, "apiserver_request_duration_seconds_sum")
}

fn by_verb_and_resource(metrics: &str, name: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    let prefix = format!("{name}{{");
    for line in metrics.lines().filter(|l| l.starts_with(&prefix)) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let label = |name: &str| -> String {
            let key = format!("{name}=\"");
            labels.split(&key).nth(1).and_then(|rest| rest.split('"').next()).unwrap_or_default().to_owned()
        };
        let resource: Vec<String> = [label("group"), label("resource"), label("subresource")]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        *counts.entry((label("verb"), resource.join("/"))).or_default() += value;
    }
    counts
}

/// Requests the API server answered with 429 so far (priority and fairness refused them), all
/// clients, from the text of `/metrics`.
pub fn throttled(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("code=\"429\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// What was served between `before` and `after`, per minute over `minutes`, highest first.
pub fn per_minute(
    before: &RequestCounts,
    after: &RequestCounts,
    minutes: f64,
) -> Vec<((String, String), f64)> {
    let mut rates: Vec<_> = after
        .iter()
        .map(|(key, &n)| (key.clone(), (n - before.get(key).copied().unwrap_or(0.0)) / minutes))
        .filter(|(_, rate)| *rate > 0.0)
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="GET",version="v1"} 10
apiserver_request_total{code="404",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="sluice.dev",resource="sqssources",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 30
"#;

    #[test]
    fn sums_codes_by_verb_and_resource() {
        let counts = parse(TEXT);
        assert_eq!(counts[&("GET".to_owned(), "apps/deployments".to_owned())], 12.0);
        assert_eq!(counts[&("APPLY".to_owned(), "sluice.dev/sqssources/status".to_owned())], 4.0);
        assert_eq!(counts[&("LIST".to_owned(), "configmaps".to_owned())], 30.0);
    }

    #[test]
    fn sums_the_seconds_spent_by_verb_and_resource() {
        let text = "apiserver_request_duration_seconds_sum{group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"APPLY\"} 1.5\n\
                    apiserver_request_duration_seconds_sum{group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"APPLY\"} 0.5\n";
        assert_eq!(seconds(text)[&("APPLY".to_owned(), "configmaps".to_owned())], 2.0);
    }

    #[test]
    fn counts_the_throttled() {
        let text = format!(
            "{TEXT}apiserver_request_total{{code=\"429\",group=\"\",resource=\"configmaps\",verb=\"GET\"}} 3\n"
        );
        assert_eq!((throttled(TEXT), throttled(&text)), (0.0, 3.0));
    }

    #[test]
    fn rates_are_deltas_per_minute_highest_first() {
        let before = parse(TEXT);
        let mut after = before.clone();
        *after.get_mut(&("GET".to_owned(), "apps/deployments".to_owned())).unwrap() += 6.0;
        *after.get_mut(&("LIST".to_owned(), "configmaps".to_owned())).unwrap() += 60.0;
        let rates = per_minute(&before, &after, 2.0);
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0], (("LIST".to_owned(), "configmaps".to_owned()), 30.0));
        assert_eq!(rates[1].1, 3.0);
    }
}
