//! One labelled sample from a reader's /metrics.
//!
//! Why: C1's `Reader::metric` sums every label set of a name, which is what most checks want; the
//! load tests also need one series alone (`errors_total{stage="deliver",error_type="failed"}`:
//! deliveries that used up their retries and went back to the queue).

use std::net::SocketAddr;

/// The sum of the samples of `name` whose labels contain every one of `labels` (`key="value"`).
pub async fn labelled(admin: SocketAddr, name: &str, labels: &[&str]) -> f64 {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the /metrics body");
    sum_labelled(&text, name, labels)
}

fn sum_labelled(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (series, value) = rest.rsplit_once(' ')?;
            let matches = series.is_empty() || series.starts_with('{');
            (matches && labels.iter().all(|l| series.contains(l))).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

#[test]
fn picks_only_the_series_asked_for() {
    let text = "sluice_reader_errors_total{stage=\"deliver\",error_type=\"failed\"} 3\n\
                sluice_reader_errors_total{stage=\"deliver\",error_type=\"rejected\"} 5\n\
                sluice_reader_errors_total_other 7\n";
    let failed = ["stage=\"deliver\"", "error_type=\"failed\""];
    assert_eq!(sum_labelled(text, "sluice_reader_errors_total", &failed), 3.0);
    assert_eq!(sum_labelled(text, "sluice_reader_errors_total", &[]), 8.0);
}
