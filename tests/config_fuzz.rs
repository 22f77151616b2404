//! A bounded, deterministic fuzz run over the config parser and applier: random edits of the shipped
//! sim-axis files and random command soups. Whatever the input, the result is a config or
//! `file:line:` errors — never a panic. Runs for at most a few seconds (fixed seed, so a failure
//! reproduces).

use std::time::{Duration, Instant};

use rtapi::components::{Registry, Validation};
use rtapi::config::Machine;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const ALPHABET: &[u8] = b" \t\n\\#=<>,.-_0123456789abcxyzPID\"[]'e+";

const WORDS: &[&str] = &[
    "loadrt",
    "addf",
    "net",
    "setp",
    "sets",
    "pid",
    "siggen",
    "stepgen",
    "encoder",
    "sim_axis",
    "count=2",
    "names=a,b",
    "count=0",
    "names=",
    "=>",
    "<=",
    "<=>",
    "servo",
    "base",
    "pid.0.command",
    "pid.0.output",
    "pid.0.enable",
    "siggen.0.sine",
    "stepgen.0.step",
    "a.command",
    "sig",
    "1",
    "-1",
    "0",
    "1e309",
    "nan",
    "0x10",
    "TRUE",
    "pid.0.do-pid-calcs",
    "siggen.0.update",
    "\\",
    "#",
    "",
    "stepgen.0.steplen",
    "encoder.0.position-scale",
    "99999999999999999999",
    "-9223372036854775808",
    "9223372036854775807",
    "addf siggen.0.update servo",
];

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..=rng.below(6) {
        match rng.below(5) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes.remove(i);
            }
            1 => {
                let i = rng.below(bytes.len() + 1);
                bytes.insert(i, ALPHABET[rng.below(ALPHABET.len())]);
            }
            2 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes.truncate(i);
            }
            3 => {
                let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
                let a = lines[rng.below(lines.len())].to_vec();
                let i = rng.below(bytes.len() + 1);
                bytes.splice(i..i, a.into_iter().chain([b'\n']));
            }
            _ => {
                // Multi-byte UTF-8 and a stray NUL, to check nothing slices inside a character.
                let i = rng.below(bytes.len() + 1);
                // A byte-order mark, an ESC sequence and a bidi override: must never reach a
                // message raw.
                let s = ["µ", "\0", "→", "é", "\u{feff}", "\u{1b}[2J", "\u{202e}"][rng.below(7)];
                bytes.splice(i..i, s.bytes());
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn soup(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(12) {
        for _ in 0..=rng.below(6) {
            s.push_str(rng.pick(WORDS));
            s.push(' ');
        }
        s.push('\n');
    }
    s
}

#[test]
fn the_parser_never_panics() {
    let root = env!("CARGO_MANIFEST_DIR");
    let toml = std::fs::read_to_string(format!("{root}/config/sim-axis.toml")).unwrap();
    let hal = std::fs::read_to_string(format!("{root}/config/sim-axis.hal")).unwrap();
    let registry = Registry::builtin();
    let mut rng = Rng(0x5EED_CAFE_F00D_1234);
    let start = Instant::now();
    let (mut runs, mut valid, mut errors) = (0u64, 0u64, 0u64);
    while runs < 20_000 && start.elapsed() < Duration::from_secs(4) {
        runs += 1;
        let t = if rng.below(4) == 0 {
            mutate(&mut rng, &toml)
        } else {
            toml.clone()
        };
        let h = match rng.below(3) {
            0 => soup(&mut rng),
            _ => mutate(&mut rng, &hal),
        };
        match Machine::from_texts("m.toml", &t, &[("m.hal", &h)]) {
            Err(es) => {
                errors += 1;
                for e in es {
                    let shown = e.to_string();
                    assert!(
                        shown.starts_with("m.toml") || shown.starts_with("m.hal"),
                        "{shown}"
                    );
                    assert_no_raw_controls(&shown);
                }
            }
            Ok(machine) => {
                let mut dry = Validation::new("fuzz").unwrap();
                match machine.apply(&mut dry, &registry) {
                    Ok(_) => valid += 1,
                    Err(e) => {
                        errors += 1;
                        assert!(e.line.is_some(), "{e}");
                        assert_no_raw_controls(&e.to_string());
                    }
                }
            }
        }
    }
    eprintln!("{runs} inputs: {valid} valid, {errors} rejected");
    assert!(runs > 500, "only {runs} inputs in the time budget");
    assert!(valid > 0 && errors > 0, "{valid} valid, {errors} rejected");
}

fn assert_no_raw_controls(shown: &str) {
    assert!(
        !shown
            .chars()
            .any(|c| c.is_control() || matches!(c, '\u{feff}' | '\u{202e}')),
        "{shown:?}"
    );
}

/// Raw bytes (not UTF-8 at random places) through the same decoding `Machine::load` uses: an error
/// names the line of the bad byte, never panics.
#[test]
fn bytes_that_are_not_utf8_get_their_line() {
    let hal = std::fs::read(format!(
        "{}/config/sim-axis.hal",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut rng = Rng(0xB17E_5EED_0000_0001);
    for _ in 0..2_000 {
        let mut bytes = hal.clone();
        let at = rng.below(bytes.len() + 1);
        let bad = [0xE9u8, 0xFF, 0x80, 0xC3][rng.below(4)];
        bytes.insert(at, bad);
        // Whatever the byte lands next to, the first invalid one is on the insert's line: a
        // newline is ASCII and never part of a multi-byte character.
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        match rtapi::config::decode("m.hal", bytes) {
            Ok(text) => panic!("decoded invalid UTF-8: {}", text.len()),
            Err(e) => {
                assert_eq!(e.line, Some(line), "{e}");
                assert!(e.message.starts_with("not UTF-8 (byte 0x"), "{e}");
                assert!(e.message.ends_with("; save the file as UTF-8"), "{e}");
            }
        }
    }
}
