#![forbid(unsafe_code)]
//! The harness the end-to-end suites run on, apart from the suites: a local Kubernetes control plane
//! ([`controlplane`]), a process runner that plays kubelet for it ([`kubelet`]), and the whole system
//! started as processes ([`system`]), with the waits ([`poll`]) they and the suites share.
pub mod controlplane;
pub mod kubelet;
pub mod poll;
pub mod system;
