//! The DGLJob controller as a library: `dgl-operator` (the binary) and the
//! integration tests both run it.
//!
//! - [`observe`]: what exists (pods classified);
//! - [`builders`]: desired objects (pure); [`pod_security`]: the
//!   restricted securityContext of the containers the operator adds;
//! - [`plan`]: the state machine (pure); [`validate`]: what the CRD cannot
//!   check (the install's protected ServiceAccounts);
//! - [`cache`]: the watch caches, compact and indexed by job;
//! - [`expectations`]: writes made but not yet seen by the watches;
//! - [`controller`]: the reconcile pipeline (apply, status, pod steps, Events);
//! - [`client`]: the API client (request counting, client-side rate limit);
//! - [`leader`], [`metrics`], [`server`]: operations.

pub mod builders;
pub mod cache;
pub mod client;
pub mod controller;
pub mod expectations;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod plan;
pub mod pod_security;
pub mod server;
pub mod validate;
