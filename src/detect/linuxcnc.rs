//! Which LinuxCNC is installed, what rtapi knows of that release, and whether LinuxCNC's own
//! `rtapi_app` would run realtime on this kernel by that release's own rule.
//!
//! The version is LinuxCNC's own record of itself: `linuxcnc_var LINUXCNCVERSION` (a shell script
//! made at LinuxCNC's build, `usr/bin/linuxcnc_var` in Debian's `linuxcnc-uspace`). It is read, not
//! run.
//!
//! LinuxCNC 2.9's `rtapi_app` runs realtime only when it is setuid root and the kernel passes its
//! test (`uspace_common.h`, `detect_realtime`): the version string (`uname -v`) names PREEMPT RT or
//! PREEMPT_RT, and, up to 2.9.8, `/sys/kernel/realtime` holds 1 as well. Mainline PREEMPT_RT (6.12
//! and later, Debian 13's RT kernels) has no `/sys/kernel/realtime`, so 2.9.0 to 2.9.8 run their
//! threads SCHED_OTHER there (LinuxCNC issue #3262; 2.9.9 dropped the file test).
//! `LINUXCNC_FORCE_REALTIME` (a non-zero number) overrides the kernel test in every 2.9.

use super::SysRoot;
use serde::Serialize;

/// LinuxCNC's record of its version, relative to the root.
pub const VERSION_FILE: &str = "usr/bin/linuxcnc_var";
/// LinuxCNC's own RTAPI master, relative to the root.
pub const RTAPI_APP: &str = "usr/bin/rtapi_app";

/// The LinuxCNC releases rtapi has run its evidence against (`tests/linuxcnc_releases.rs` and the
/// host's suite): version prefix and where it came from.
pub const VERIFIED: &[(&str, &str)] = &[
    ("2.9.0~pre1", "Debian 12 (bookworm)"),
    ("2.9.4", "Debian 13 (trixie), Ubuntu 25.10 and 26.04"),
    ("2.9.9", "Debian unstable (sid)"),
];

/// The 2.9 releases whose HAL structures (`hal_priv.h`), uuid segment (`uspace_common.h`) and
/// master protocol are those of the verified ones in LinuxCNC's own source (the tags v2.9.0 to
/// v2.9.10 hold one and the same `hal_priv.h`): the master accepts them and still checks hal_lib's
/// layout at start.
pub const SAME_LAYOUT_PATCHES: std::ops::RangeInclusive<u32> = 0..=10;

/// A LinuxCNC version: `2.9.0~pre1+git20230208.f1270d6ed7`, `2.9.4`, `2.10.0~pre0`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    /// As LinuxCNC records it.
    pub text: String,
    /// Major, minor, patch.
    pub number: (u32, u32, u32),
    /// A pre-release (`~pre…`).
    pub pre: bool,
}

impl Version {
    /// Parses LinuxCNC's version text; `None` when it does not start with `MAJOR.MINOR.PATCH`.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        let end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let mut parts = text[..end].split('.').map(str::parse::<u32>);
        let number = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => (a, b, c),
            _ => return None,
        };
        Some(Version {
            text: text.to_string(),
            number,
            pre: text[end..].starts_with('~'),
        })
    }

    /// What rtapi's master does with this release.
    pub fn support(&self) -> Support {
        if VERIFIED.iter().any(|(v, _)| self.text.starts_with(v)) {
            return Support::Verified;
        }
        match self.number {
            (2, 9, p) if SAME_LAYOUT_PATCHES.contains(&p) => Support::SameLayout,
            (2, 10, _) => Support::Protocol210,
            _ => Support::Unknown,
        }
    }

    /// Whether this release's `rtapi_app` also needs `/sys/kernel/realtime` (2.9.0 to 2.9.8).
    fn needs_sys_kernel_realtime(&self) -> bool {
        matches!(self.number, (2, 9, p) if p < 9) || self.number < (2, 9, 0)
    }
}

/// What rtapi's master does with a LinuxCNC release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Support {
    /// Run and verified with rtapi: accepted.
    Verified,
    /// A 2.9 release whose structures are the verified ones in LinuxCNC's source, not run here:
    /// accepted, its hal_lib's layout checked at start.
    SameLayout,
    /// LinuxCNC 2.10 (development): another master protocol (abstract socket, binary framing):
    /// refused.
    Protocol210,
    /// Any other release: its structures are unknown to rtapi: refused.
    Unknown,
}

impl Support {
    /// Whether the master runs this release's modules.
    pub fn accepted(self) -> bool {
        matches!(self, Support::Verified | Support::SameLayout)
    }
}

/// The LinuxCNC installed under a root.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    /// Its version, as `linuxcnc_var` records it (None: the file holds none rtapi can read).
    pub version: Option<Version>,
    /// What rtapi's master does with it.
    pub support: Support,
    /// Whether its `rtapi_app` is setuid root (None: not there).
    pub rtapi_app_setuid_root: Option<bool>,
    /// Whether its own `rtapi_app` runs realtime on this kernel, by its release's rule.
    pub stock_realtime: bool,
    /// Why, in one line.
    pub stock_reason: String,
}

/// LinuxCNC's version text from `linuxcnc_var`'s script text: its `LINUXCNCVERSION) echo X;;` case
/// (or the `LINUXCNCVERSION=X` line of its `--all` listing).
pub fn version_text(script: &str) -> Option<String> {
    script.lines().find_map(|l| {
        let l = l.trim();
        let rest = l
            .strip_prefix("LINUXCNCVERSION)")
            .and_then(|r| r.trim().strip_prefix("echo"))
            .map(|r| r.trim().trim_end_matches(";;").trim())
            .or_else(|| {
                l.strip_prefix("echo \"LINUXCNCVERSION=")
                    .map(|r| r.trim_end_matches('"'))
            })?;
        let rest = rest.trim_matches('"');
        (!rest.is_empty() && !rest.contains(char::is_whitespace)).then(|| rest.to_string())
    })
}

/// The LinuxCNC installed under `root` (None: no `linuxcnc_var` there), judged against the kernel
/// version string `kernel_version` (`uname -v`) and `force` (`LINUXCNC_FORCE_REALTIME`'s value).
pub fn detect(
    root: &SysRoot,
    kernel_version: Option<&str>,
    force: Option<&str>,
) -> Option<Installed> {
    let script = root.read_text(VERSION_FILE)?;
    let version = version_text(&script).and_then(|t| Version::parse(&t));
    let support = version.as_ref().map_or(Support::Unknown, Version::support);
    let setuid_root = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(root.path(RTAPI_APP))
            .ok()
            .map(|m| m.uid() == 0 && m.mode() & libc::S_ISUID != 0)
    };
    let sys_realtime = root
        .read_text("sys/kernel/realtime")
        .map(|t| t.trim() == "1");
    let (stock_realtime, stock_reason) = stock_rule(
        version.as_ref(),
        setuid_root,
        kernel_version,
        sys_realtime,
        force,
    );
    Some(Installed {
        version,
        support,
        rtapi_app_setuid_root: setuid_root,
        stock_realtime,
        stock_reason,
    })
}

/// LinuxCNC 2.9's `detect_realtime` for `version`: whether its `rtapi_app` runs realtime, and why.
fn stock_rule(
    version: Option<&Version>,
    setuid_root: Option<bool>,
    kernel_version: Option<&str>,
    sys_kernel_realtime: Option<bool>,
    force: Option<&str>,
) -> (bool, String) {
    let name = version.map_or("this LinuxCNC".to_string(), |v| {
        format!("LinuxCNC {}", v.text)
    });
    let non_rt = "runs its threads non-realtime (\"POSIX non-realtime\", SCHED_OTHER)";
    match setuid_root {
        None => return (false, format!("{name} has no {RTAPI_APP}")),
        Some(false) => {
            return (
                false,
                format!("/{RTAPI_APP} is not setuid root: {name} {non_rt}"),
            )
        }
        Some(true) => {}
    }
    // atoi(): an optional sign and leading digits; anything else is 0.
    let forced = force.is_some_and(|f| {
        let f = f.trim_start();
        let body = f.strip_prefix(['-', '+']).unwrap_or(f);
        let digits = body.len() - body.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        body[..digits].parse::<u64>().is_ok_and(|n| n != 0)
    });
    if forced {
        return (
            true,
            format!("LINUXCNC_FORCE_REALTIME is set: {name} runs realtime whatever the kernel"),
        );
    }
    let v = kernel_version.unwrap_or("");
    let upper = v.to_ascii_uppercase();
    let rt_kernel = upper.contains("PREEMPT RT") || upper.contains("PREEMPT_RT");
    if !rt_kernel {
        return (
            false,
            format!(
                "the kernel is not PREEMPT_RT (its version string: {:?}): {name} {non_rt}",
                v.trim()
            ),
        );
    }
    if version.is_none_or(Version::needs_sys_kernel_realtime) && sys_kernel_realtime != Some(true) {
        return (
            false,
            format!(
                "the kernel is PREEMPT_RT but has no /sys/kernel/realtime holding 1 (mainline \
                 PREEMPT_RT, 6.12 and later, dropped it), which {name} also requires: it {non_rt} \
                 (LinuxCNC issue #3262, fixed in 2.9.9)"
            ),
        );
    }
    (
        true,
        format!("the kernel is PREEMPT_RT and /{RTAPI_APP} is setuid root: {name} runs realtime"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_linuxcnc_writes_them() {
        let v = Version::parse("2.9.0~pre1+git20230208.f1270d6ed7").unwrap();
        assert_eq!((v.number, v.pre), ((2, 9, 0), true));
        assert_eq!(v.support(), Support::Verified);
        assert_eq!(
            Version::parse("2.9.4").unwrap().support(),
            Support::Verified
        );
        assert_eq!(
            Version::parse("2.9.9").unwrap().support(),
            Support::Verified
        );
        assert_eq!(
            Version::parse("2.9.7").unwrap().support(),
            Support::SameLayout
        );
        assert_eq!(
            Version::parse("2.9.11").unwrap().support(),
            Support::Unknown
        );
        assert_eq!(
            Version::parse("2.10.0~pre0").unwrap().support(),
            Support::Protocol210
        );
        assert_eq!(Version::parse("2.8.4").unwrap().support(), Support::Unknown);
        assert_eq!(Version::parse("2.9"), None);
        assert_eq!(Version::parse("banana"), None);
    }

    #[test]
    fn the_version_is_read_from_linuxcnc_var() {
        let script = "case $1 in\n    LINUXCNCVERSION) echo 2.9.4;;\nesac\n";
        assert_eq!(version_text(script).as_deref(), Some("2.9.4"));
        let all = "  echo \"LINUXCNCVERSION=2.9.0~pre1+git20230208.f1270d6ed7\n";
        assert_eq!(
            version_text(all).as_deref(),
            Some("2.9.0~pre1+git20230208.f1270d6ed7")
        );
        assert_eq!(version_text("echo hello\n"), None);
    }

    #[test]
    fn each_release_has_its_own_kernel_rule() {
        let v294 = Version::parse("2.9.4").unwrap();
        let v299 = Version::parse("2.9.9").unwrap();
        let rt = Some("#1 SMP PREEMPT_RT Debian 6.12.38-1");
        // Mainline PREEMPT_RT without /sys/kernel/realtime: #3262.
        let (on, why) = stock_rule(Some(&v294), Some(true), rt, None, None);
        assert!(!on && why.contains("#3262"), "{why}");
        assert!(stock_rule(Some(&v299), Some(true), rt, None, None).0);
        assert!(stock_rule(Some(&v294), Some(true), rt, Some(true), None).0);
        let (on, why) = stock_rule(
            Some(&v299),
            Some(true),
            Some("#1 SMP PREEMPT_DYNAMIC"),
            None,
            None,
        );
        assert!(!on && why.contains("not PREEMPT_RT"), "{why}");
        let (on, why) = stock_rule(Some(&v299), Some(false), rt, None, None);
        assert!(!on && why.contains("not setuid root"), "{why}");
        assert!(stock_rule(Some(&v294), Some(true), Some("#1 SMP"), None, Some("1")).0);
        assert!(!stock_rule(Some(&v294), Some(true), Some("#1 SMP"), None, Some("0")).0);
        assert!(!stock_rule(Some(&v294), Some(true), Some("#1 SMP"), None, Some("x")).0);
    }
}
