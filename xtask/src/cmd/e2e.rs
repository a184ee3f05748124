//! `cargo xtask e2e`: start the node cluster, run the scenarios of `e2e`, stop it.
use std::time::Instant;

use anyhow::Result;

use crate::e2e::{finish, start, Args};
use crate::stack::runtime;

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let rt = runtime()?;
    let stack = start(&rt, &args)?;
    finish(&rt, stack, &args, (started, Default::default()))
}
