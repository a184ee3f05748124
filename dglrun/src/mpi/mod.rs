//! MPI for partition mode DistParMETIS: `mpirun`'s remote agent
//! (`dglrun rsh`, in place of ssh) and its daemons run by the workers'
//! agents.

pub mod exec;
pub mod network;
pub mod rsh;
