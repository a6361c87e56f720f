//! Secret values an HTTP sink reads from files: header values (tokens) and a CA bundle.
//!
//! Why files: the operator never puts secret material in the readers' config ConfigMap; it mounts
//! each referenced Secret key read-only at `<SLUICE_SECRETS_DIR>/<secret>/<key>`. The kubelet
//! rewrites a mounted Secret in place when it is rotated, so a header value is read again when its
//! cached copy is older than [`REREAD_AFTER`]: a rotated token takes effect within that time, with
//! no restart and no file read per request. A value that cannot be read again keeps the last good
//! one and says so once per failure streak. The CA bundle is read once, at start (a rotated CA
//! takes effect at the next start: the pods' config hash does not cover Secret contents).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use sluice_crds::{HttpSecretRefs, SecretKeyRef};

use super::error::SinkBuildError;

/// Where the operator mounts referenced Secret keys (its `SLUICE_SECRETS_DIR`).
pub const SECRETS_DIR_VARIABLE: &str = "SLUICE_SECRETS_DIR";
const DEFAULT_SECRETS_DIR: &str = "/var/run/sluice/secrets";
/// How old a cached header value may get before the file is read again.
pub const REREAD_AFTER: Duration = Duration::from_secs(10);

/// The directory referenced keys are read from: `SLUICE_SECRETS_DIR`, else the operator's default.
pub fn secrets_dir() -> PathBuf {
    std::env::var_os(SECRETS_DIR_VARIABLE).map_or_else(|| PathBuf::from(DEFAULT_SECRETS_DIR), PathBuf::from)
}

fn key_path(dir: &Path, key: &SecretKeyRef) -> PathBuf {
    dir.join(&key.name).join(&key.key)
}

/// One header whose value lives in a file.
pub struct SecretHeader {
    pub name: HeaderName,
    path: PathBuf,
    cached: Mutex<Cached>,
}

struct Cached {
    value: HeaderValue,
    read_at: Instant,
    failing: bool,
}

impl SecretHeader {
    /// The current value: the cached one, read again from the file when older than
    /// [`REREAD_AFTER`].
    pub fn value(&self) -> HeaderValue {
        let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cached.read_at.elapsed() >= REREAD_AFTER {
            cached.read_at = Instant::now();
            match read_value(&self.path) {
                Ok(value) => {
                    cached.value = value;
                    cached.failing = false;
                }
                Err(reason) if !cached.failing => {
                    cached.failing = true;
                    tracing::warn!(header = %self.name, path = %self.path.display(), %reason,
                        "cannot read the header's Secret file again: sending its last value; check the Secret and its mount");
                }
                Err(_) => {}
            }
        }
        cached.value.clone()
    }
}

fn read_value(path: &Path) -> Result<HeaderValue, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Secrets written with `echo` or a YAML block scalar end in a newline nobody means to send.
    let text = text.trim_end_matches(['\n', '\r']);
    let mut value =
        HeaderValue::from_str(text).map_err(|_| format!("{} is not a valid header value", path.display()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The headers and CA certificates an HTTP sink's `secretRefs` name, read from `dir`. Errors name
/// the field relative to the sink and the file, so a missing mount reads as what to fix.
pub fn load(
    refs: &HttpSecretRefs,
    dir: &Path,
) -> Result<(Vec<SecretHeader>, Vec<reqwest::Certificate>), SinkBuildError> {
    let mut headers = Vec::with_capacity(refs.headers.len());
    for (i, header) in refs.headers.iter().enumerate() {
        let field = format!("http.secretRefs.headers[{i}]");
        let name = HeaderName::try_from(header.name.as_str()).map_err(|e| {
            SinkBuildError::new(&format!("{field}.name"), format!("not a valid header name: {e}"))
        })?;
        let path = key_path(dir, &header.secret_key_ref);
        let value = read_value(&path).map_err(|m| {
            SinkBuildError::new(&format!("{field}.secretKeyRef"), format!("{m}: is the Secret key mounted?"))
        })?;
        let cached = Mutex::new(Cached { value, read_at: Instant::now(), failing: false });
        headers.push(SecretHeader { name, path, cached });
    }
    let mut roots = Vec::new();
    if let Some(bundle) = &refs.ca_bundle {
        let field = "http.secretRefs.caBundle";
        let path = key_path(dir, bundle);
        let pem = std::fs::read(&path).map_err(|e| {
            SinkBuildError::new(
                field,
                format!("cannot read {}: {e}: is the Secret key mounted?", path.display()),
            )
        })?;
        roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            SinkBuildError::new(field, format!("{} is not a PEM certificate bundle: {e}", path.display()))
        })?;
        if roots.is_empty() {
            return Err(SinkBuildError::new(field, format!("{} holds no certificate", path.display())));
        }
    }
    Ok((headers, roots))
}

#[cfg(test)]
mod tests {
    use sluice_crds::SecretHeader as SpecHeader;

    use super::*;

    fn key(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef { name: name.into(), key: key.into() }
    }

    #[test]
    fn header_values_come_from_the_mounted_files_without_their_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("api")).unwrap();
        std::fs::write(dir.path().join("api/token"), "Bearer s3cret\n").unwrap();
        let refs = HttpSecretRefs {
            headers: vec![SpecHeader { name: "Authorization".into(), secret_key_ref: key("api", "token") }],
            ca_bundle: None,
        };
        let (headers, roots) = load(&refs, dir.path()).unwrap();
        assert!(roots.is_empty());
        assert_eq!(headers[0].name, "authorization");
        assert_eq!(headers[0].value(), "Bearer s3cret");
        assert!(headers[0].value().is_sensitive(), "kept out of Debug output");
    }

    #[test]
    fn a_missing_file_or_a_bad_bundle_names_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let refs = HttpSecretRefs {
            headers: vec![SpecHeader { name: "X-Token".into(), secret_key_ref: key("api", "token") }],
            ca_bundle: None,
        };
        let error = load(&refs, dir.path()).err().unwrap().to_string();
        assert!(error.contains("http.secretRefs.headers[0].secretKeyRef"), "{error}");
        assert!(error.contains("is the Secret key mounted?"), "{error}");

        std::fs::create_dir_all(dir.path().join("ca")).unwrap();
        std::fs::write(dir.path().join("ca/bundle.pem"), "not a certificate").unwrap();
        let refs = HttpSecretRefs { headers: vec![], ca_bundle: Some(key("ca", "bundle.pem")) };
        let error = load(&refs, dir.path()).err().unwrap().to_string();
        assert!(error.contains("http.secretRefs.caBundle"), "{error}");
    }
}
