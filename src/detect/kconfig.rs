//! The kernel build configuration, from `proc/config.gz` or `boot/config-<release>`.

use super::sysroot::SysRoot;
use flate2::read::GzDecoder;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;

/// A parsed kernel config: `CONFIG_X=value` lines; `# CONFIG_X is not set` lines are recorded as `n`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct KernelConfig {
    /// Where it was read from (`/proc/config.gz`, `/boot/config-…`).
    pub(crate) source: String,
    #[serde(skip)]
    options: BTreeMap<String, String>,
}

impl KernelConfig {
    /// Finds and parses the config; `None` when neither place has a readable one.
    pub(crate) fn load(root: &SysRoot, release: Option<&str>) -> Option<KernelConfig> {
        if let Ok(gz) = root.read_bytes("proc/config.gz") {
            let mut text = String::new();
            if GzDecoder::new(gz.as_slice())
                .read_to_string(&mut text)
                .is_ok()
            {
                return Some(Self::parse("/proc/config.gz", &text));
            }
        }
        let rel = format!("boot/config-{}", release?);
        let text = root.read(&rel).text()?.to_string();
        Some(Self::parse(&format!("/{rel}"), &text))
    }

    pub(crate) fn parse(source: &str, text: &str) -> KernelConfig {
        let mut options = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("# CONFIG_") {
                if let Some(name) = rest.strip_suffix(" is not set") {
                    options.insert(format!("CONFIG_{name}"), "n".to_string());
                }
            } else if let Some((k, v)) = line.split_once('=') {
                if k.starts_with("CONFIG_") {
                    options.insert(k.to_string(), v.trim_matches('"').to_string());
                }
            }
        }
        KernelConfig {
            source: source.to_string(),
            options,
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// True only for `=y`; unset, `m` or absent are false.
    pub(crate) fn enabled(&self, name: &str) -> bool {
        matches!(self.get(name), Some("y"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_set_unset_and_values() {
        let c = KernelConfig::parse(
            "x",
            "CONFIG_PREEMPT_RT=y\n# CONFIG_NO_HZ_FULL is not set\nCONFIG_HZ=1000\nCONFIG_LOCALVERSION=\"-rt\"\ngarbage\n",
        );
        assert!(c.enabled("CONFIG_PREEMPT_RT"));
        assert!(!c.enabled("CONFIG_NO_HZ_FULL"));
        assert_eq!(c.get("CONFIG_NO_HZ_FULL"), Some("n"));
        assert_eq!(c.get("CONFIG_HZ"), Some("1000"));
        assert_eq!(c.get("CONFIG_LOCALVERSION"), Some("-rt"));
        assert_eq!(c.get("CONFIG_MISSING"), None);
    }
}
