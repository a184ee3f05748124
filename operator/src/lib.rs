//! The DGLJob controller as a library: `dgl-operator` (the binary) and the
//! integration tests both run it.
//!
//! - [`pure`]: the pure stage, observe -> validate -> build -> plan (no I/O):
//!   what exists, what is refused, the desired objects, the state machine;
//! - [`cache`]: the watch caches, compact and indexed by job;
//! - [`expectations`]: writes made but not yet seen by the watches;
//! - [`controller`]: the reconcile pipeline (apply, status, pod steps, Events);
//! - [`client`]: the API client (request counting, client-side rate limit);
//! - [`leader`], [`metrics`], [`server`]: operations.

pub mod cache;
pub mod client;
pub mod controller;
pub mod expectations;
pub mod leader;
pub mod metrics;
pub mod pure;
pub mod server;
