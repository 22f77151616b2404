//! `rtapi halcmd`: halcmd commands against a running instance, from another terminal.
//!
//! `rtapi halcmd show pin` runs one command; `-f FILE` a file (read here, by this process, and sent
//! in pieces; `-i INI` for `[SECTION]KEY`, read by the owner, a regular file; `-f -` reads commands
//! from standard input); with neither, an interactive
//! prompt with history and tab completion of commands and of the instance's object names. The
//! commands go over the instance's control socket (see `instance/control/`) to the owner, which runs them
//! through the same interpreter as its `.hal` files.

use std::path::{Path, PathBuf};

use rtapi_hal::{Access, HalReader};

use super::instance::{self, Target};
use super::prompt::{self, Outcome};
use super::Failure;
use crate::instance::control::{send_file, ClientError, ControlClient, Flow, Reply};

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// Run the commands of FILE in the instance (`-` reads them from standard input).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Substitute `[SECTION]KEY` in FILE from this INI file.
    #[arg(short = 'i', long = "ini", value_name = "INI", requires = "file")]
    ini: Option<PathBuf>,
    /// Keep going after a failed command in FILE (by default the first failure stops it).
    #[arg(short = 'k', long = "keep-going")]
    keep_going: bool,
    /// One command to run, e.g. `rtapi halcmd show pin` (none: the interactive prompt).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        conflicts_with = "file"
    )]
    command: Vec<String>,
}

pub(crate) fn connect(target: &Target) -> Result<(HalReader, ControlClient), Failure> {
    let reader = instance::open(target, Access::ReadOnly)?;
    let pid = reader.header().owner_pid;
    if !reader.owner_alive() {
        return Err(Failure::runtime(format!(
            "instance '{}' is {}: there is nobody to take commands",
            target.instance,
            instance::dead_state(pid)
        )));
    }
    let client = ControlClient::connect(&target.instance, pid).map_err(|e| match e {
        ClientError::NotListening(_) => Failure::runtime(format!(
            "instance '{}' (pid {pid}) takes no halcmd commands: only instances of `rtapi run` and \
             `rtapi halrun` do (latency-test's do not); `rtapi show`, `getp`, `setp` and `sets` work \
             on any instance",
            target.instance
        )),
        other => Failure::runtime(other.to_string()),
    })?;
    Ok((reader, client))
}

/// Every object name of the instance, for completion.
fn names(reader: &HalReader) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(s) = reader.snapshot() {
        v.extend(s.components.into_iter().map(|c| c.name));
        v.extend(s.pins.into_iter().map(|p| p.name));
        v.extend(s.params.into_iter().map(|p| p.name));
        v.extend(s.signals.into_iter().map(|p| p.name));
        v.extend(s.functions.into_iter().map(|p| p.name));
        v.extend(s.threads.into_iter().map(|p| p.name));
    }
    v
}

fn print(reply: &Reply) -> bool {
    let _ = super::out::print(&reply.out);
    if let Some(e) = &reply.error {
        super::out::eprintln(&format!("rtapi: {e}"));
    }
    reply.ok
}

fn lost(e: ClientError) -> Failure {
    Failure::runtime(e.to_string())
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let (reader, mut client) = connect(&args.target)?;
    let failed = if !args.command.is_empty() {
        usize::from(!print(
            &client.execute(&args.command.join(" ")).map_err(lost)?,
        ))
    } else if let Some(file) = args.file.as_deref().filter(|f| *f != Path::new("-")) {
        // This process reads the file (its permissions, its standard input for /dev/stdin, a
        // FIFO only it waits on) and sends its lines in pieces; the owner opens none of it.
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut input = std::fs::File::open(file)
            .map_err(|e| Failure::runtime(format!("{}: cannot read: {e}", file.display())))?;
        let sent = send_file(
            &mut client,
            &mut input,
            &abs(file),
            args.ini.as_deref().map(abs).as_deref(),
            args.keep_going,
            &mut |r| {
                print(r);
            },
        )
        .map_err(lost)?;
        sent.failed
    } else {
        let mut broken = None;
        let failed = prompt::interactive(
            "halcmd: ",
            Box::new(move || names(&reader)),
            crate::components::linuxcnc::ModuleLoader::new().loadable_module_names(),
            &mut |line| match client.execute(line) {
                Ok(r) => Outcome {
                    out: r.out,
                    error: r.error,
                    flow: if r.quit { Flow::Quit } else { Flow::Continue },
                },
                Err(e) => {
                    let message = e.to_string();
                    broken = Some(e);
                    Outcome {
                        out: String::new(),
                        error: Some(message),
                        flow: Flow::Quit,
                    }
                }
            },
        )
        .map_err(|e| Failure::runtime(format!("the prompt failed: {e}")))?;
        if let Some(e) = broken {
            return Err(lost(e));
        }
        failed
    };
    if failed > 0 {
        return Err(Failure::runtime(format!(
            "{failed} command{} failed",
            if failed == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}
