//! LinuxCNC INI files, read as halcmd's `-i` reads them for `[SECTION]KEY` substitution.
//!
//! Rules (LinuxCNC's reader, which halcmd's lookup uses): `[NAME]` starts a section; `KEY = VALUE`
//! lines (blanks around `=` and at the end dropped; nothing after the value is a comment); lines
//! starting with `#` or `;` are comments; a line ending in `\` continues on the next. A lookup of
//! `[SECTION]KEY` searches only the **first** `[SECTION]` block and returns the **first** `KEY`
//! there; `[]KEY` searches the whole file; an empty value counts as missing. `#INCLUDE FILE`
//! (LinuxCNC 2.9 expands it before halcmd sees the file) reads FILE, relative to the including
//! file, in its place.

use std::path::Path;

use crate::config::{read_text, ConfigError};
use crate::rt::units::quote;

/// One `KEY = VALUE` line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    section: String,
    /// Which `[SECTION]` block of the file (0 before the first header).
    block: usize,
    key: String,
    value: String,
    /// Where it stands: the file (as named in messages; an `#INCLUDE`d one's own) and its line.
    at: (String, usize),
}

/// A `[SECTION]` header and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    section: String,
    at: (String, usize),
}

/// A parsed INI file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ini {
    /// As shown in messages.
    pub(crate) name: String,
    entries: Vec<Entry>,
    headers: Vec<Header>,
    /// Section blocks so far (headers seen).
    blocks: usize,
}

/// `#INCLUDE` depth beyond which a file is taken to include itself.
const MAX_INCLUDE_DEPTH: usize = 16;

impl Ini {
    /// Reads and parses `path` (named in messages as given).
    pub fn load(path: &Path) -> Result<Ini, ConfigError> {
        let mut ini = Ini {
            name: path.display().to_string(),
            entries: Vec::new(),
            headers: Vec::new(),
            blocks: 0,
        };
        ini.read(path, 0)?;
        Ok(ini)
    }

    /// `[RTAPI]LINUXCNC_MODULES`: directories searched for LinuxCNC modules before
    /// `$RTAPI_LINUXCNC_MODULES` and Debian's (`:`-separated, relative to the INI file).
    pub fn linuxcnc_module_dirs(&self) -> Vec<std::path::PathBuf> {
        let base = Path::new(&self.name).parent().unwrap_or(Path::new(""));
        self.get("RTAPI", "LINUXCNC_MODULES")
            .map(|v| {
                v.split(':')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(|d| base.join(d))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Parses `text` as the file `name` (no `#INCLUDE`s are followed).
    pub fn parse(name: &str, text: &str) -> Result<Ini, ConfigError> {
        let mut ini = Ini {
            name: name.to_string(),
            entries: Vec::new(),
            headers: Vec::new(),
            blocks: 0,
        };
        ini.add(name, text, None, 0)?;
        Ok(ini)
    }

    fn read(&mut self, path: &Path, depth: usize) -> Result<(), ConfigError> {
        let shown = path.display().to_string();
        let text = read_text(path, &shown)?;
        self.add(&shown, &text, path.parent(), depth)
    }

    fn add(
        &mut self,
        name: &str,
        text: &str,
        dir: Option<&Path>,
        depth: usize,
    ) -> Result<(), ConfigError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut section = String::new();
        let mut block = self.blocks;
        let mut pending = String::new();
        for (i, raw) in text.lines().enumerate() {
            // A line ending in `\` continues on the next one.
            if let Some(head) = raw.strip_suffix('\\') {
                pending.push_str(head);
                continue;
            }
            let joined;
            let raw = if pending.is_empty() {
                raw
            } else {
                joined = std::mem::take(&mut pending) + raw;
                &joined
            };
            let line = raw.trim();
            if let Some(file) = line.strip_prefix("#INCLUDE") {
                let file = file.trim();
                let Some(dir) = dir else { continue };
                if depth >= MAX_INCLUDE_DEPTH {
                    return Err(ConfigError::at(
                        name,
                        i + 1,
                        format!("#INCLUDE {}: includes nested more than {MAX_INCLUDE_DEPTH} deep; does the file include itself?", quote(file)),
                    ));
                }
                let path = dir.join(file);
                self.blocks = block;
                self.read(&path, depth + 1).map_err(|e| {
                    ConfigError::at(name, i + 1, format!("#INCLUDE {}: {e}", quote(file)))
                })?;
                block = self.blocks;
                continue;
            }
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                if let Some(end) = rest.find(']') {
                    section = rest[..end].to_string();
                    block += 1;
                    self.headers.push(Header {
                        section: section.clone(),
                        at: (name.to_string(), i + 1),
                    });
                    continue;
                }
            }
            if let Some((key, value)) = line.split_once('=') {
                self.entries.push(Entry {
                    section: section.clone(),
                    block,
                    key: key.trim().to_string(),
                    value: value.trim().to_string(),
                    at: (name.to_string(), i + 1),
                });
            }
            // Any other line is ignored, as LinuxCNC's reader ignores it.
        }
        self.blocks = block;
        Ok(())
    }

    /// The first value of `key` in the first `[section]` block (the whole file when `section` is
    /// empty); an empty value counts as missing, as in LinuxCNC.
    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        let block = if section.is_empty() {
            None
        } else {
            Some(self.entries.iter().find(|e| e.section == section)?.block)
        };
        self.entries
            .iter()
            .find(|e| block.is_none_or(|b| e.block == b) && e.key == key)
            .map(|e| e.value.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every value of `key` in `section`, in file order (`[HAL]HALFILE` may be given many times).
    pub fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.section == section && e.key == key)
            .map(|e| e.value.as_str())
            .collect()
    }

    /// Where `[section]key` stands (with `value`, the entry of that value: one `[HAL]HALFILE` of
    /// many), as (file, line); else where the first `[section]` header stands; else `None`. For
    /// messages that point at the line to fix.
    pub fn place(&self, section: &str, key: &str, value: Option<&str>) -> Option<(&str, usize)> {
        self.entries
            .iter()
            .find(|e| e.section == section && e.key == key && value.is_none_or(|v| e.value == v))
            .map(|e| &e.at)
            .or_else(|| {
                self.headers
                    .iter()
                    .find(|h| h.section == section)
                    .map(|h| &h.at)
            })
            .map(|(f, l)| (f.as_str(), *l))
    }

    /// Whether the file has section `section`'s key anywhere (for messages).
    pub(crate) fn has_section(&self, section: &str) -> bool {
        self.entries.iter().any(|e| e.section == section)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_name_the_line_of_a_key_else_of_its_section() {
        let ini = Ini::parse(
            "m.ini",
            "# top\n[HAL]\nHALFILE = a.hal\nHALFILE = b.hal\n\n[KINS]\nJOINTS = 3\n",
        )
        .unwrap();
        assert_eq!(
            ini.place("HAL", "HALFILE", Some("b.hal")),
            Some(("m.ini", 4))
        );
        assert_eq!(ini.place("HAL", "HALFILE", None), Some(("m.ini", 3)));
        assert_eq!(ini.place("KINS", "KINEMATICS", None), Some(("m.ini", 6)));
        assert_eq!(ini.place("TRAJ", "COORDINATES", None), None);
    }

    #[test]
    fn sections_comments_and_first_wins() {
        let ini = Ini::parse(
            "m.ini",
            "# top\n[EMCMOT]\nSERVO_PERIOD = 1000000\n; note\n[AXIS_X]\nMAX_VELOCITY=3.5  \nMAX_VELOCITY = 9\n[HAL]\nHALFILE = a.hal\nHALFILE = b.hal\nodd line\n",
        )
        .unwrap();
        assert_eq!(ini.get("EMCMOT", "SERVO_PERIOD"), Some("1000000"));
        assert_eq!(ini.get("AXIS_X", "MAX_VELOCITY"), Some("3.5"));
        assert_eq!(ini.get("", "MAX_VELOCITY"), Some("3.5"));
        assert_eq!(ini.get("AXIS_Y", "MAX_VELOCITY"), None);
        assert_eq!(ini.all("HAL", "HALFILE"), ["a.hal", "b.hal"]);
        assert!(ini.has_section("HAL") && !ini.has_section("TRAJ"));
        // Only the first block of a section is searched; continued lines join; empty is missing.
        let ini = Ini::parse(
            "m.ini",
            "[A]\nK = 1 # not a comment\nE =\n[B]\nL = x\\\ny\n[A]\nK = 2\nM = 3\n",
        )
        .unwrap();
        assert_eq!(ini.get("A", "K"), Some("1 # not a comment"));
        assert_eq!(ini.get("A", "M"), None);
        assert_eq!(ini.get("", "M"), Some("3"));
        assert_eq!(ini.get("B", "L"), Some("xy"));
        assert_eq!(ini.get("A", "E"), None);
    }

    #[test]
    fn includes_are_read_relative_to_the_including_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/more.inc"), "[B]\nK = 2\n").unwrap();
        std::fs::write(
            dir.path().join("m.ini"),
            "[A]\nK = 1\n#INCLUDE sub/more.inc\n",
        )
        .unwrap();
        let ini = Ini::load(&dir.path().join("m.ini")).unwrap();
        assert_eq!(ini.get("B", "K"), Some("2"));
        std::fs::write(dir.path().join("loop.ini"), "#INCLUDE loop.ini\n").unwrap();
        let e = Ini::load(&dir.path().join("loop.ini")).unwrap_err();
        assert!(e.to_string().contains("nested more than 16"), "{e}");
    }
}
