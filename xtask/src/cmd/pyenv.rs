//! `cargo xtask pyenv`: create or reuse the cached venv and print its interpreter.
use anyhow::Result;

use crate::pyenv::{ensure_venv, lock_cache, remove_stamp, venv_dir, Args};
use crate::util::repo_root;

pub fn run(args: Args) -> Result<()> {
    let root = repo_root();
    if args.force {
        let venv = venv_dir()?;
        let _lock = lock_cache(&venv)?;
        remove_stamp(&venv)?;
    }
    let python = ensure_venv(&root)?;
    if args.print_python {
        println!("{}", python.display());
    } else {
        println!("python: {}", python.display());
        println!("venv:   {}", venv_dir()?.display());
    }
    Ok(())
}
