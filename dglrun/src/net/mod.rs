//! The network between the job's pods: the authenticated control channel,
//! the agents' accept loop, and where the peers are.

pub mod agent;
pub mod channel;
pub mod hosts;
