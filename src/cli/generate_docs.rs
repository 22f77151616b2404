//! `rtapi generate-docs --out DIR`: the man pages and shell completions, made from the same
//! clap definition the binary parses with, so they cannot drift from it. Packaging runs it:
//! `DIR/man/man1/rtapi.1`, one `rtapi-SUB.1` per subcommand (`rtapi-recorder-dump.1` for a nested
//! one), and `DIR/completions/rtapi.bash`, `_rtapi` (zsh), `rtapi.fish`. It is not one of `Cli`'s
//! subcommands (`main` parses it on its own): what it generates from `Cli` does not offer it.

use super::{Cli, Failure};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// Arguments of `rtapi generate-docs`.
#[derive(clap::Parser)]
#[command(
    name = "generate-docs",
    bin_name = "rtapi generate-docs",
    about = "Write rtapi's man pages and shell completions, for packaging: DIR/man/man1/*.1, \
             DIR/completions/{rtapi.bash,_rtapi,rtapi.fish}"
)]
pub(crate) struct Args {
    /// The directory to write `man/man1/*.1` and `completions/*` into (made if missing; files
    /// already there are replaced).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// The command line as the generated files show it: the package version and the verified LinuxCNC
/// releases, no build hash or date (a package rebuilt from the same source makes the same pages).
fn command() -> clap::Command {
    let version = env!("CARGO_PKG_VERSION");
    Cli::command()
        .version(version)
        .long_version(format!("{version}\n{}", super::verified_line()))
}

fn write_err(path: &Path, e: std::io::Error) -> Failure {
    Failure::runtime(format!("{}: {e}", path.display()))
}

/// Writes the man pages and completions under `args.out`.
pub(crate) fn run(args: Args) -> Result<(), Failure> {
    let man = args.out.join("man/man1");
    let completions = args.out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    }
    clap_mangen::generate_to(command(), &man).map_err(|e| write_err(&man, e))?;
    for (shell, file) in [
        (Shell::Bash, "rtapi.bash"),
        (Shell::Zsh, "_rtapi"),
        (Shell::Fish, "rtapi.fish"),
    ] {
        let path = completions.join(file);
        let mut out = std::fs::File::create(&path).map_err(|e| write_err(&path, e))?;
        clap_complete::generate(shell, &mut command(), "rtapi", &mut out);
    }
    println!(
        "rtapi: man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(())
}
