//! Reading the SqsSource YAML the reader runs from (standalone file or the operator's ConfigMap).
//!
//! Why one function: the same document the API server would accept must be accepted here, so the
//! crds crate's validator (`parse_source_yaml`) is the only parser. A rejected document becomes a
//! configuration error (exit 2) naming the field.

use std::path::Path;

use sluice_crds::SqsSource;

use crate::process::error::{Error, Result};

pub fn load(path: &Path) -> Result<SqsSource> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config("--source", format!("cannot read {}: {e}", path.display())))?;
    parse(&text)
}

/// Parse and validate like the apiserver would (schema, unknown fields, CEL rules). The error
/// names the first offending field and lists every violation.
pub fn parse(text: &str) -> Result<SqsSource> {
    sluice_crds::validate::parse_source_yaml(text).map_err(|e| {
        let (first, rest) = e.violations().split_first().map_or((None, &[][..]), |(f, r)| (Some(f), r));
        let field =
            first.map(|v| v.path.clone()).filter(|p| !p.is_empty()).unwrap_or_else(|| "source".into());
        let mut message = first.map(|v| v.message.clone()).unwrap_or_else(|| e.to_string());
        for more in rest {
            message.push_str(&format!("\n{more}"));
        }
        Error::config(field, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "apiVersion: sluice.dev/v1alpha1\nkind: SqsSource\nmetadata: {name: demo}\nspec:\n  queues: [{url: 'http://127.0.0.1:4566/queue/us-east-1/000000000000/src'}]\n  sinks: [{name: out, log: {}}]\n";

    #[test]
    fn a_valid_document_parses() {
        let source = parse(DOC).unwrap();
        assert_eq!(source.metadata.name.as_deref(), Some("demo"));
        assert_eq!(source.spec.sinks[0].name, "out");
    }

    #[test]
    fn an_unknown_field_is_a_config_error_naming_it() {
        let err = parse(&DOC.replace("sinks:", "bogus: 1\n  sinks:")).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("bogus"), "{err}");
        assert!(err.to_string().starts_with("invalid configuration: spec"), "{err}");
    }

    #[test]
    fn the_kind_is_checked() {
        let err = parse(&DOC.replace("kind: SqsSource", "kind: ConfigMap")).unwrap_err();
        assert!(err.to_string().starts_with("invalid configuration: kind: "), "{err}");
    }

    #[test]
    fn a_missing_file_is_a_config_error() {
        let err = load(Path::new("/nonexistent/source.yaml")).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--source"), "{err}");
    }
}
