//! Where log lines go while something holds the terminal. A line-editing prompt (`halrun -I`,
//! `rtapi halcmd`) and a live display redrawn in place (`latency-test`) own the lines they draw: a
//! log line written to stderr then lands in the middle of what is being typed, or splits the table.
//! The process's logger writes through [`LogSink`]; whoever holds the terminal takes the lines while
//! it does ([`divert`]): the prompt prints them above itself, the live display above its next redraw
//! ([`Queue`]). Without a divert they go to stderr as they come.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

/// Takes one log record's text (ending with a newline).
pub type Divert = Box<dyn FnMut(String) + Send>;

static DIVERTED: Mutex<Option<Divert>> = Mutex::new(None);

fn diverted() -> std::sync::MutexGuard<'static, Option<Divert>> {
    DIVERTED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The logger's output: stderr, or the divert in place.
pub struct LogSink;

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut d = diverted();
        match d.as_mut() {
            Some(f) => f(String::from_utf8_lossy(buf).into_owned()),
            None => {
                drop(d);
                io::stderr().lock().write_all(buf)?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// While it lives, log lines go to the divert it was made with.
#[must_use = "the divert ends when this is dropped"]
pub struct Diverted(());

impl Drop for Diverted {
    fn drop(&mut self) {
        *diverted() = None;
    }
}

/// Sends log lines to `f` until the returned guard is dropped.
pub fn divert(f: Divert) -> Diverted {
    *diverted() = Some(f);
    Diverted(())
}

/// Log lines held for a live display to print above its next redraw.
#[derive(Clone, Default)]
pub struct Queue(Arc<Mutex<Vec<String>>>);

impl Queue {
    /// Diverts log lines into this queue until the guard is dropped.
    pub fn divert(&self) -> Diverted {
        let q = self.clone();
        divert(Box::new(move |line| {
            q.0.lock().unwrap_or_else(|p| p.into_inner()).push(line)
        }))
    }

    /// The lines held so far, each without its newline.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divert_takes_the_lines_until_it_is_dropped() {
        let q = Queue::default();
        {
            let _d = q.divert();
            LogSink.write_all(b"one\n").unwrap();
            LogSink.write_all(b"two\nthree\n").unwrap();
            assert_eq!(q.take(), ["one", "two", "three"]);
            assert!(q.take().is_empty(), "taken once");
        }
        // Gone back to stderr: the queue sees nothing more.
        LogSink.write_all(b"to stderr\n").unwrap();
        assert!(q.take().is_empty());
    }
}
