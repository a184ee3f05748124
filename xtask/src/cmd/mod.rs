//! The `cargo xtask` commands, one module each: the CLI entry (`run`) and
//! what only that command does. Nothing outside `cmd` imports these, and
//! they import none of each other: the suites, stacks and helpers they
//! share live in the modules beside `cmd` (see docs/architecture.md).
pub mod bench;
pub mod bench_shards;
pub mod chaos;
pub mod cluster;
pub mod demo;
pub mod e2e;
pub mod fuzz;
pub mod kueue;
pub mod pyenv;
pub mod test;
mod test_target;
