//! `completion` and `man`: stepctl's shell completion and man pages,
//! generated from its own command definitions so they never drift from it.

use std::path::Path;

use crate::exit::Failure;

/// `stepctl man DIR`: one page per command and subcommand.
pub fn man_pages(mut command: clap::Command, dir: &Path) -> Result<(), Failure> {
    let io = |e: std::io::Error| Failure::Other(anyhow::anyhow!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    command.build();
    let mut written = 0;
    write_pages(&command, "", dir, &mut written).map_err(io)?;
    println!("wrote {written} man pages to {}", dir.display());
    Ok(())
}

/// Writes `command`'s page as PREFIX-NAME.1, then its subcommands'.
fn write_pages(
    command: &clap::Command,
    prefix: &str,
    dir: &Path,
    written: &mut usize,
) -> std::io::Result<()> {
    let name = if prefix.is_empty() {
        command.get_name().to_owned()
    } else {
        format!("{prefix}-{}", command.get_name())
    };
    let page = command
        .clone()
        .name(name.clone())
        .display_name(name.clone());
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::fs::write(dir.join(format!("{name}.1")), out)?;
    *written += 1;
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &name, dir, written)?;
    }
    Ok(())
}
