//! The DGLJob controller as a library: `dgl-operator` (the binary) and the
//! integration tests both run it.
//!
//! - [`observe`]: what exists (pods classified);
//! - [`builders`]: desired objects (pure);
//! - [`plan`]: the state machine (pure);
//! - [`controller`]: watches, apply, status, Events;
//! - [`leader`], [`metrics`], [`server`]: operations.

pub mod builders;
pub mod controller;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod plan;
pub mod server;
