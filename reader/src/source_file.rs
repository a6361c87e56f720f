//! Reading the SqsSource YAML the reader runs from (standalone file or the operator's ConfigMap).
//!
//! Why one function: the same document the API server would accept must be accepted here, and
//! the parser (serde_yaml today, the crds crate's validator when it lands) stays behind this
//! one door. A parse error becomes a configuration error (exit 2) naming the field.

use std::path::Path;

use sluice_crds::SqsSource;

use crate::error::{Error, Result};

pub fn load(path: &Path) -> Result<SqsSource> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config("--source", format!("cannot read {}: {e}", path.display())))?;
    parse(&text)
}

/// The document's type, checked before the spec so a wrong kind is not reported as a bad field.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

pub fn parse(text: &str) -> Result<SqsSource> {
    if let Ok(meta) = serde_yaml::from_str::<TypeMeta>(text) {
        if meta.kind != "SqsSource" {
            return Err(Error::config("kind", format!("expected SqsSource, found {:?}", meta.kind)));
        }
        if !meta.api_version.starts_with("sluice.dev/") {
            return Err(Error::config(
                "apiVersion",
                format!("expected sluice.dev/v1alpha1, found {:?}", meta.api_version),
            ));
        }
    }
    let source: SqsSource = serde_yaml::from_str(text).map_err(|e| {
        let field = e.to_string().split_once(": ").map(|(p, _)| p.to_owned()).filter(|p| !p.contains(' '));
        Error::config(field.unwrap_or_else(|| "source".into()), e.to_string())
    })?;
    Ok(source)
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
        assert!(err.to_string().contains("unknown field `bogus`"), "{err}");
        assert!(err.to_string().contains("spec"), "{err}");
    }

    #[test]
    fn the_kind_is_checked() {
        let err = parse(&DOC.replace("kind: SqsSource", "kind: ConfigMap")).unwrap_err();
        assert!(err.to_string().contains("kind: expected SqsSource"), "{err}");
    }

    #[test]
    fn a_missing_file_is_a_config_error() {
        let err = load(Path::new("/nonexistent/source.yaml")).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--source"), "{err}");
    }
}
