//! dglrun: the programs inside a DGLJob's pods (partitioner, launcher,
//! worker), also usable on plain machines. See docs/runtime-design.md.
//!
//! Modules, bottom up:
//! - [`channel`]: the authenticated control channel (HMAC handshake, frames);
//! - [`agent`]: the accept loop the partitioner and the workers share;
//! - [`dataset`]: the partition layout on disk, its checks, the manifest;
//! - [`chunks`]: files as chunks with their own sha256 (lazy, on all cores);
//! - [`transfer`]: shard files pod to pod, resumed, verified, retried;
//! - [`procs`]: child processes in their own process groups;
//! - [`command`]: users' own command lines with placeholders (launch.py's convention);
//! - [`dglenv`]: DGL's environment contract for servers and trainers;
//! - [`preflight`]: checks before DGL starts;
//! - [`training`]: one machine's servers + trainers, supervised;
//! - [`partition`], [`worker`], [`launcher`]: the three roles;
//! - [`progress`]: the trainers' progress lines, published on the launcher's pod;
//! - [`standalone`]: the launcher of a job without workers (one local process);
//! - [`exec`], [`rsh`]: MPI's daemons on the workers for partition mode
//!   DistParMETIS, started by `mpirun` through `dglrun rsh` (no ssh);
//! - [`distpart`]: the launcher's side of DistParMETIS (mpirun of
//!   `dgl-partition rank`, one rank per worker);
//! - [`hosts`]: hostfile / partfile / ip_config;
//! - [`cli`]: the command line, and each role's settings from it.

pub mod agent;
pub mod channel;
pub mod chunks;
pub mod cli;
pub mod command;
pub mod dataset;
pub mod dglenv;
pub mod distpart;
pub mod exec;
pub mod graphbolt;
pub mod hosts;
pub mod launcher;
pub mod partition;
pub mod preflight;
pub mod procs;
pub mod progress;
pub mod rsh;
pub mod standalone;
pub mod termination;
pub mod training;
pub mod transfer;
pub mod worker;
