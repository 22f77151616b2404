//! `rtapi --version` says which build this is and which LinuxCNC releases rtapi was verified with,
//! the latter from the code's own list (`detect::linuxcnc::VERIFIED`).

use std::process::Command;

fn version(flag: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .arg(flag)
        .output()
        .unwrap();
    assert!(out.status.success(), "rtapi {flag}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `rtapi 0.1.0 (git 1a2b3c4[-dirty], built 2026-12-06)`, or `git unknown` outside a checkout.
fn assert_build_line(line: &str) {
    let head = format!("rtapi {} (git ", env!("CARGO_PKG_VERSION"));
    let rest = line
        .strip_prefix(&head)
        .unwrap_or_else(|| panic!("{line:?} does not start with {head:?}"));
    let (git, rest) = rest.split_once(", built ").expect("a build date");
    let hash = git.strip_suffix("-dirty").unwrap_or(git);
    assert!(
        hash == "unknown" || (hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "git {git:?} in {line:?}"
    );
    let date = rest.strip_suffix(')').expect("closing parenthesis");
    let parts: Vec<&str> = date.split('-').collect();
    assert!(
        parts.len() == 3
            && [4, 2, 2] == [parts[0].len(), parts[1].len(), parts[2].len()]
            && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit())),
        "date {date:?} in {line:?}"
    );
}

#[test]
fn version_names_the_build_and_every_verified_linuxcnc_release() {
    let text = version("--version");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_build_line(lines[0]);
    let verified = lines[1]
        .strip_prefix("verified with LinuxCNC ")
        .unwrap_or_else(|| panic!("{:?}", lines[1]));
    let releases = rtapi::detect::linuxcnc::VERIFIED;
    assert!(!releases.is_empty());
    let listed: Vec<&str> = verified.split("; ").collect();
    assert_eq!(listed.len(), releases.len(), "{verified}");
    for ((release, systems), shown) in releases.iter().zip(listed) {
        assert_eq!(shown, format!("{release} on {systems}"));
    }
}

#[test]
fn short_version_is_the_build_line_alone() {
    let text = version("-V");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_build_line(text.trim_end());
}
