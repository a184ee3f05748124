//! DGL's side of the contract: its launch environment for servers and
//! trainers, users' command lines (launch.py's convention), the checks
//! before DGL starts, one machine's supervised training, GraphBolt.

pub mod command;
pub mod dglenv;
pub mod graphbolt;
pub mod preflight;
pub mod training;
