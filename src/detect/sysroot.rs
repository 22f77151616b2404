//! Every file the detector reads goes through a [`SysRoot`], so tests and `--sysroot DIR` can point the
//! whole detection at a fixture tree that fakes `/proc`, `/sys` and `/boot`.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// What reading one file gave. Detection never panics on a bad file: it records what it could not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The file's contents, trimmed of surrounding whitespace.
    Text(String),
    /// The file does not exist (a kernel without the feature, or a fixture that leaves it out).
    Missing,
    /// The file exists but could not be read (permissions, not UTF-8, an I/O error); the reason is kept.
    Unreadable(String),
}

impl Reading {
    /// The text, if the file was read.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Reading::Text(s) => Some(s),
            _ => None,
        }
    }

    /// Parses the trimmed text; garbage counts as unknown (`None`).
    pub(crate) fn parse<T: std::str::FromStr>(&self) -> Option<T> {
        self.text().and_then(|s| s.parse().ok())
    }
}

/// The root directory that stands for `/` (normally `/` itself).
#[derive(Clone, PartialEq, Eq)]
pub struct SysRoot {
    root: PathBuf,
}

impl fmt::Debug for SysRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SysRoot({})", self.root.display())
    }
}

impl Default for SysRoot {
    fn default() -> Self {
        SysRoot::new("/")
    }
}

/// Files larger than this are not system files we care about; reading stops there.
const MAX_FILE_BYTES: u64 = 4 << 20;

impl SysRoot {
    /// A root at directory `root`: `/proc/cmdline` is then read as `root/proc/cmdline`. The directory is
    /// not checked; files missing under it read as unknown.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysRoot { root: root.into() }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The real path of `rel` (written without a leading slash, e.g. `proc/cmdline`).
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// The names in directory `rel`, unsorted; empty when it cannot be read.
    pub(crate) fn list_dir(&self, rel: &str) -> Vec<String> {
        std::fs::read_dir(self.path(rel))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Reads a text file, trimmed.
    pub(crate) fn read(&self, rel: &str) -> Reading {
        match self.read_bytes(rel) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(s) => Reading::Text(s.trim().to_string()),
                Err(_) => Reading::Unreadable(format!("{rel}: not UTF-8 text")),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Reading::Missing,
            Err(e) => Reading::Unreadable(format!("{rel}: {e}")),
        }
    }

    /// The trimmed text of `rel`, or `None` when it is missing or unreadable.
    pub(crate) fn read_text(&self, rel: &str) -> Option<String> {
        self.read(rel).text().map(str::to_string)
    }

    /// Reads a file's raw bytes (at most 4 MiB).
    pub(crate) fn read_bytes(&self, rel: &str) -> io::Result<Vec<u8>> {
        let file = std::fs::File::open(self.path(rel))?;
        let mut out = Vec::new();
        file.take(MAX_FILE_BYTES).read_to_end(&mut out)?;
        Ok(out)
    }
}
