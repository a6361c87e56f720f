//! Test support: a recording HTTP sink on loopback and the reader binary driven as a process (as
//! the harness and the operator run it); queues come from `sluice_tests::localstack`.

#![allow(dead_code)] // each test file uses part of it

pub mod process;
pub mod sink_server;
