//! `rtapi tune --persist`: what `rtapi tune` applies, applied again at every boot by a systemd unit.
//!
//! The kernel forgets every run-time setting at a reboot, so the unit runs the same `rtapi tune`
//! command line (the same options, so the same plan for the same machine) once at boot, as a oneshot
//! service that stays active; its stop runs `rtapi tune --revert`. Its revert file lives in `/run`,
//! which is emptied at boot as the settings are, so a boot never finds a stale one.
//!
//! [`unit_text`] renders the unit, [`install`] writes it and enables it the way `systemctl enable`
//! does (a link in `multi-user.target.wants/`), [`remove`] takes both away. Nothing here talks to
//! systemd itself: the command line decides whether a running systemd is told (`daemon-reload`,
//! `start`, `stop`), so the same files can be written into any unit directory (a test's, an image's).

use std::io;
use std::path::{Path, PathBuf};

/// The unit's name.
pub const UNIT_NAME: &str = "rtapi-tune.service";

/// Where an administrator's units live, and where `--persist` writes by default.
pub const DEFAULT_UNIT_DIR: &str = "/etc/systemd/system";

/// The target whose `.wants/` link enables the unit.
const WANTED_BY: &str = "multi-user.target";

/// Why an argument cannot be written into the unit's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadArgument(pub String);

impl std::fmt::Display for BadArgument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} cannot go into a systemd command line (a line break or a control character): use a plain value",
            self.0
        )
    }
}

impl std::error::Error for BadArgument {}

/// One word of an `ExecStart=` line, quoted as systemd reads it back: plain words as they are, any
/// other in double quotes with `\` and `"` escaped; `%` (a specifier) and `$` (a variable) doubled.
pub fn quote(word: &str) -> Result<String, BadArgument> {
    if word.chars().any(|c| c.is_control()) {
        return Err(BadArgument(word.to_string()));
    }
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._,:=@+-".contains(c));
    if plain {
        return Ok(word.to_string());
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(out)
}

/// The unit that runs `exe tune --from-unit ARGS…` at boot and `exe tune --revert --from-unit …` at
/// its stop.
///
/// `args` are `rtapi tune`'s options as the user gave them (never `--persist`, `--dry-run` or
/// `--revert`); `revert_args` the ones `--revert` needs to find the same revert file. `network`
/// orders the unit after the network is up (the NIC tuning of `--board` needs the card's route).
pub fn unit_text(
    exe: &Path,
    args: &[String],
    revert_args: &[String],
    network: bool,
) -> Result<String, BadArgument> {
    let exe = exe
        .to_str()
        .ok_or_else(|| BadArgument(exe.display().to_string()))?;
    let line = |extra: &[&str], rest: &[String]| -> Result<String, BadArgument> {
        let mut words = vec![quote(exe)?, "tune".to_string()];
        for w in extra {
            words.push(quote(w)?);
        }
        for w in rest {
            words.push(quote(w)?);
        }
        Ok(words.join(" "))
    };
    // `--from-unit`: the stop reverts the values and leaves the unit in place (a shutdown must not
    // uninstall it).
    let start = line(&["--from-unit"], args)?;
    let stop = line(&["--revert", "--from-unit"], revert_args)?;
    let (after, wants) = if network {
        (
            "After=network-online.target\nWants=network-online.target\n",
            "",
        )
    } else {
        ("", "")
    };
    Ok(format!(
        "# Written by `rtapi tune --persist`; `rtapi tune --revert` removes it.\n\
         [Unit]\n\
         Description=rtapi tune: the RT CPUs' run-time settings, applied at boot\n\
         Documentation=man:rtapi-tune(1)\n\
         {after}{wants}\
         \n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         ExecStart={start}\n\
         ExecStop={stop}\n\
         \n\
         [Install]\n\
         WantedBy={WANTED_BY}\n"
    ))
}

/// The unit file's path in `dir`.
pub fn unit_path(dir: &Path) -> PathBuf {
    dir.join(UNIT_NAME)
}

/// The link that enables the unit, in `dir`.
pub fn wants_link(dir: &Path) -> PathBuf {
    dir.join(format!("{WANTED_BY}.wants")).join(UNIT_NAME)
}

/// Whether a unit written by `--persist` is in `dir`.
pub fn installed(dir: &Path) -> bool {
    unit_path(dir).exists() || std::fs::symlink_metadata(wants_link(dir)).is_ok()
}

/// Writes the unit into `dir` (replacing an earlier one atomically) and enables it.
pub fn install(dir: &Path, text: &str) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = unit_path(dir);
    let tmp = dir.join(format!(".{UNIT_NAME}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    let link = wants_link(dir);
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(&link) {
        Ok(_) => std::fs::remove_file(&link)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(&path, &link)?;
    Ok(path)
}

/// Disables and removes the unit from `dir`; `Ok(false)` when there was none. A unit file that
/// `--persist` did not write (no first-line mark) is left alone and reported.
pub fn remove(dir: &Path) -> io::Result<bool> {
    let path = unit_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.starts_with("# Written by `rtapi tune --persist`") => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} was not written by `rtapi tune --persist`: left alone (remove it yourself if it is no longer wanted)",
                    path.display()
                ),
            ));
        }
        Ok(_) | Err(_) => {}
    }
    let mut removed = false;
    let link = wants_link(dir);
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::remove_file(&link)?;
        removed = true;
        // The directory goes only if it is empty now (other units may be enabled there).
        if let Some(parent) = link.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    match std::fs::remove_file(&path) {
        Ok(()) => removed = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_and_others_are_quoted_as_systemd_reads_them() {
        assert_eq!(quote("--cpu").unwrap(), "--cpu");
        assert_eq!(quote("2-3,5").unwrap(), "2-3,5");
        assert_eq!(
            quote("/tmp/a b/x%y$z\"q\\").unwrap(),
            "\"/tmp/a b/x%%y$$z\\\"q\\\\\""
        );
        assert_eq!(quote("").unwrap(), "\"\"");
        assert!(quote("a\nb").is_err());
    }

    #[test]
    fn the_unit_runs_the_same_options_and_reverts_at_stop() {
        let args = vec!["--cpu".to_string(), "1".to_string()];
        let text = unit_text(Path::new("/usr/bin/rtapi"), &args, &[], false).unwrap();
        assert!(
            text.contains("\nExecStart=/usr/bin/rtapi tune --from-unit --cpu 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nExecStop=/usr/bin/rtapi tune --revert --from-unit\n"),
            "{text}"
        );
        assert!(text.contains("\nWantedBy=multi-user.target\n"), "{text}");
        assert!(!text.contains("network-online"), "{text}");
        let net = unit_text(Path::new("/usr/bin/rtapi"), &args, &[], true).unwrap();
        assert!(net.contains("After=network-online.target"), "{net}");
    }

    #[test]
    fn install_enables_and_remove_takes_both_away_but_not_a_foreign_unit() {
        let dir = tempfile::tempdir().unwrap();
        let text = unit_text(Path::new("/usr/bin/rtapi"), &[], &[], false).unwrap();
        let path = install(dir.path(), &text).unwrap();
        assert_eq!(std::fs::read_link(wants_link(dir.path())).unwrap(), path);
        assert!(installed(dir.path()));
        // Installing again replaces, never duplicates.
        install(dir.path(), &text).unwrap();
        assert!(remove(dir.path()).unwrap());
        assert!(!installed(dir.path()));
        assert!(!remove(dir.path()).unwrap());
        std::fs::write(unit_path(dir.path()), "[Unit]\n").unwrap();
        assert!(remove(dir.path()).is_err());
        assert!(unit_path(dir.path()).exists());
    }
}
