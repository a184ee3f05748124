//! The operator's pure stage: everything a reconcile decides, with no I/O,
//! in the order it runs (Stackable-style: observe -> validate, inside the
//! plan -> plan -> build the desired children). [`crate::controller`]
//! applies what it decides.
//!
//! - [`observe`]: what exists (a job's pods, classified);
//! - [`validate`]: the [`validate::ValidJob`] only it makes, which the
//!   forward planning and the builders require; what the CRD cannot check
//!   (the install's protected ServiceAccounts; rules of [`dgl_api::rules`]
//!   for a job stored before the CRD had them);
//! - [`builders`]: desired objects (pods, ConfigMap, Secret, RBAC,
//!   NetworkPolicy, PodGroup); [`pod_security`]: the restricted
//!   securityContext of the containers the operator adds;
//! - [`plan`]: the state machine, from the job and its pods to the status
//!   and the pod steps;
//! - [`desired`]: every other child a valid job wants after the plan, as
//!   one value the controller applies;
//! - [`conditions`]: the one path of a job condition (every type is one of
//!   [`dgl_api::JobConditionType`]) from a detector's finding to the status
//!   and its Event; [`apply_failed`]: the detector of reconciles that keep
//!   failing; [`kueue`]: Kueue's contract, the `Queued` condition's detector;
//! - [`settings`]: the operator's settings these read ([`settings::BuildConfig`]).

pub mod apply_failed;
pub mod builders;
pub mod conditions;
pub mod desired;
pub mod kueue;
pub mod observe;
pub mod plan;
pub mod pod_security;
pub mod settings;
pub mod validate;
