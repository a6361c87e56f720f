//! The control plane's certificates and keys, as a cluster installer (kubeadm, EKS) makes them.
//!
//! One CA signs the API server's serving certificate and every client certificate; client
//! certificates carry the identity the API server authenticates (CN = user, O = groups), so the
//! controller-manager, the scheduler, the node and the test's administrator each reach the API as
//! themselves and RBAC and the Node authorizer judge them as on any cluster. The service-account
//! key pair signs and verifies ServiceAccount tokens (TokenRequest, projected volumes).
//!
//! Why the `openssl` command rather than a crate: it is on every Linux and macOS machine, and the
//! few files it writes are exactly what the control plane's flags name, readable with the same tool
//! when a test fails. Keys are P-256 (PKCS#8), which every client here (kube-rs over rustls, kubectl,
//! Go) reads; the service-account key is RSA, the algorithm every token verifier accepts.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct KeyPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Who a client certificate names.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    /// File stem (`admin` → `admin.crt`, `admin.key`).
    pub file: &'a str,
    /// The user (certificate CN).
    pub user: &'a str,
    /// Its groups (one O each).
    pub groups: &'a [&'a str],
}

/// The identities the control plane's components and the harness use.
pub const ADMIN: Identity<'static> =
    Identity { file: "admin", user: "sluice-admin", groups: &["system:masters"] };
pub const CONTROLLER_MANAGER: Identity<'static> =
    Identity { file: "controller-manager", user: "system:kube-controller-manager", groups: &[] };
pub const SCHEDULER: Identity<'static> =
    Identity { file: "scheduler", user: "system:kube-scheduler", groups: &[] };

/// The files of one cluster's PKI, under one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Creates the CA, the serving certificate, the service-account keys and the components' client
    /// certificates in `dir`, unless they already exist there (a restart keeps its identities).
    pub fn ensure(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let pki = Self { dir: dir.to_owned() };
        if !pki.ca().cert.is_file() {
            pki.make_ca()?;
        }
        if !pki.serving().cert.is_file() {
            pki.make_serving()?;
        }
        if !pki.service_account_key().is_file() {
            pki.make_service_account_keys()?;
        }
        for who in [ADMIN, CONTROLLER_MANAGER, SCHEDULER] {
            pki.client(who)?;
        }
        Ok(pki)
    }

    /// The CA (trusted by clients, and by the API server for client certificates).
    pub fn ca(&self) -> KeyPair {
        self.pair("ca")
    }

    /// The API server's serving certificate.
    pub fn serving(&self) -> KeyPair {
        self.pair("apiserver")
    }

    /// The private key that signs ServiceAccount tokens.
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// Its public half, which verifies them.
    pub fn service_account_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// A client certificate for `who`, made on first use.
    pub fn client(&self, who: Identity<'_>) -> Result<KeyPair> {
        let pair = self.pair(who.file);
        if pair.cert.is_file() {
            return Ok(pair);
        }
        let mut subject = String::new();
        for group in who.groups {
            subject.push_str(&format!("/O={group}"));
        }
        subject.push_str(&format!("/CN={}", who.user));
        self.signed(&pair, &subject, "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature")?;
        Ok(pair)
    }

    fn pair(&self, stem: &str) -> KeyPair {
        KeyPair { cert: self.dir.join(format!("{stem}.crt")), key: self.dir.join(format!("{stem}.key")) }
    }

    fn make_ca(&self) -> Result<()> {
        let ca = self.ca();
        new_key(&ca.key)?;
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            path(&ca.key),
            "-out",
            path(&ca.cert),
            "-days",
            "3650",
            "-subj",
            "/CN=sluice-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ])
    }

    fn make_serving(&self) -> Result<()> {
        // The names a client may dial: loopback here, and the in-cluster names of the `kubernetes`
        // Service that a real pod would use.
        let sans = "subjectAltName=IP:127.0.0.1,IP:::1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,\
                    DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local";
        let ext = format!(
            "{sans}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment"
        );
        self.signed(&self.serving(), "/CN=kube-apiserver", &ext)
    }

    fn make_service_account_keys(&self) -> Result<()> {
        let key = self.service_account_key();
        openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", path(&key)])?;
        openssl(&["pkey", "-in", path(&key), "-pubout", "-out", path(&self.service_account_pub())])
    }

    /// A key and a certificate for `subject` signed by the CA, with `extensions` (openssl syntax).
    fn signed(&self, pair: &KeyPair, subject: &str, extensions: &str) -> Result<()> {
        new_key(&pair.key)?;
        let csr = pair.cert.with_extension("csr");
        let ext = pair.cert.with_extension("ext");
        std::fs::write(&ext, extensions)?;
        openssl(&["req", "-new", "-key", path(&pair.key), "-out", path(&csr), "-subj", subject])?;
        let ca = self.ca();
        openssl(&[
            "x509",
            "-req",
            "-in",
            path(&csr),
            "-CA",
            path(&ca.cert),
            "-CAkey",
            path(&ca.key),
            "-CAcreateserial",
            "-out",
            path(&pair.cert),
            "-days",
            "3650",
            "-extfile",
            path(&ext),
        ])?;
        let _ = std::fs::remove_file(csr);
        let _ = std::fs::remove_file(ext);
        Ok(())
    }
}

fn new_key(path_: &Path) -> Result<()> {
    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path(path_)])
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn openssl(args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .context("running openssl (install it: apt-get install openssl, or brew install openssl)")?;
    if !out.status.success() {
        bail!("openssl {} failed: {}", args[0], String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_name_the_user_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path()).unwrap();
        let node =
            pki.client(Identity { file: "node", user: "system:node:n1", groups: &["system:nodes"] }).unwrap();
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-in", path(&node.cert)])
            .output()
            .unwrap();
        let subject = String::from_utf8_lossy(&out.stdout);
        assert!(subject.contains("O = system:nodes") && subject.contains("CN = system:node:n1"), "{subject}");
        let verify = Command::new("openssl")
            .args(["verify", "-CAfile", path(&pki.ca().cert), path(&pki.serving().cert)])
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
    }
}
