//! dglrun: the programs inside a DGLJob's pods (partitioner, launcher,
//! worker), also usable on plain machines. See docs/runtime-design.md.
//!
//! Modules, bottom up:
//! - [`net`]: the authenticated control channel, the agents' accept loop,
//!   where the peers are (hostfile, partfile, ip_config);
//! - [`dataset`]: the partition layout on disk, its checks, the manifest;
//! - [`transfer`]: shard files pod to pod: chunks with their own sha256,
//!   served by the partitioner, fetched (resumed, verified, retried) by a
//!   worker;
//! - [`procs`]: child processes in their own process groups;
//! - [`clock`]: deadlines that saturate instead of overflowing;
//! - [`dgl`]: DGL's launch contract, users' command lines (launch.py's
//!   convention), preflight checks, one machine's training, GraphBolt;
//! - [`mpi`]: `mpirun`'s remote agent (`dglrun rsh`), its daemons on the
//!   workers, MPI's network (partition mode DistParMETIS);
//! - [`progress`]: the trainers' progress lines, published on the launcher's pod;
//! - [`termination`]: the error as the container's termination message;
//! - [`workers`]: the worker count's meanings (partitions, workers, none);
//! - [`cli`]: the command line (clap) and the role it names;
//! - [`roles`]: one folder per role (partitioner, worker, launcher,
//!   standalone, distpart, probe), each with its settings from the command
//!   line and what it does.

pub mod cli;
pub mod clock;
pub mod dataset;
pub mod dgl;
pub mod mpi;
pub mod net;
pub mod procs;
pub mod progress;
pub mod roles;
pub mod termination;
pub mod transfer;
pub mod workers;
