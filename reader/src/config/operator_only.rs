//! Fields of an `SqsSource` that only the operator carries out.
//!
//! Why a warning and not an error: the same document runs under the operator and standalone
//! (README, "Standalone"), and a user trying a source locally before applying it should not have to
//! strip fields from it. But a standalone reader that silently ignored `spec.suspend: true` or a
//! `spec.replay` request would leave its user believing the source was paused or the dead letters
//! were coming back; so each such field gets one WARN line at start saying what is ignored and why.

use sluice_crds::SqsSource;

/// One line per field set in `source` that a standalone reader does not act on.
pub fn ignored_standalone(source: &SqsSource) -> Vec<String> {
    let mut ignored = Vec::new();
    if source.spec.suspend {
        ignored.push(
            "spec.suspend is true, but only the operator suspends a source (it scales the readers to 0); \
             this standalone reader runs anyway: stop the process to pause it"
                .to_owned(),
        );
    }
    if let Some(replay) = &source.spec.replay {
        ignored.push(format!(
            "spec.replay (id '{}') is carried out by the operator, not by a reader; this standalone reader \
             ignores it: apply the source to a cluster to replay its dead letters",
            replay.id
        ));
    }
    ignored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::source_file::parse;

    const HEAD: &str = "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {name: s}\nspec:\n  \
        queues: [{url: 'http://127.0.0.1:4566/queue/us-east-1/000000000000/q'}]\n  \
        sinks: [{name: out, log: {}}]\n";

    #[test]
    fn a_plain_source_ignores_nothing() {
        assert!(ignored_standalone(&parse(HEAD).unwrap()).is_empty());
    }

    #[test]
    fn suspend_and_replay_are_each_named() {
        let doc = format!("{HEAD}  suspend: true\n  replay: {{id: after-incident}}\n");
        let lines = ignored_standalone(&parse(&doc).unwrap());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("spec.suspend is true"), "{}", lines[0]);
        assert!(lines[1].starts_with("spec.replay (id 'after-incident')"), "{}", lines[1]);
    }
}
