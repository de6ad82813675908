//! `warden completions SHELL` and `warden man`: made from the same clap
//! definitions the command line parses with (the flags of `run` and
//! `create` come from the field table), so they cannot drift from it.

use anyhow::Context;
use std::io::Write;
use std::path::Path;

/// The completion script of `shell` for `command`, on standard output.
pub fn completions(shell: clap_complete::Shell, mut command: clap::Command) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "warden", &mut out);
    out.flush().context("cannot write the completion script")?;
    Ok(0)
}

/// The manual page of `command` on standard output (`dir` absent), or a
/// page for it and one per subcommand (`warden-run.1`, ...) written into
/// `dir`.
pub fn man(command: clap::Command, dir: Option<&Path>) -> anyhow::Result<u8> {
    let command = command.name("warden");
    match dir {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command)
                .render(&mut out)
                .context("cannot write the manual page")?;
            out.flush().context("cannot write the manual page")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?;
        }
    }
    Ok(0)
}
