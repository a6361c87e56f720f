#![forbid(unsafe_code)]
//! The harness the end-to-end suites run on: the real Kubernetes control plane ([`controlplane`]),
//! started with a PKI of its own ([`pki`], [`kubeconfig`]); the process kubelet that is its one node
//! ([`kubelet`]); a whole cluster with what users install first ([`cluster`], [`install`]); and the
//! system as a suite sees it ([`system`]), with the waits ([`poll`]) they share.
pub mod cluster;
pub mod controlplane;
pub mod install;
pub mod kubeconfig;
pub mod kubelet;
pub mod pki;
pub mod poll;
pub mod system;
