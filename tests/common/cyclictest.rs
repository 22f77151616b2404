//! cyclictest's `-h N` histogram text, read by the tests themselves (not the crate's parser), strictly:
//! the layout as cyclictest (rt-tests) prints it, which the tests also check against a real
//! cyclictest run.
//!
//! ```text
//! # /dev/cpu_dma_latency set to 0us          (comments before the histogram, any)
//! # Histogram
//! 000000 000012\t000003                       (bin %06d, a space, per thread %06lu joined by tabs)
//! …                                           (bins 0…N-1, each once, in order)
//! # Total: 000000012 000000003                (" %09llu" per thread: samples in the bins)
//! # Min Latencies: 00005 00005                (" %05lu" per thread, µs)
//! # Avg Latencies: 00014 00019
//! # Max Latencies: 00045 00060
//! # Histogram Overflows: 00998 01000          (samples beyond the last bin)
//! # Histogram Overflow at cycle number:
//! # Thread 0: 00000 00001 # 00996 others     (" %05lu" per listed cycle, then " # %05lu others")
//! # Thread 1: …
//! ```

/// The numbers of one histogram file, per thread (column).
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// `bins[thread][bin]`.
    pub bins: Vec<Vec<u64>>,
    pub total: Vec<u64>,
    pub min_us: Vec<u64>,
    pub avg_us: Vec<u64>,
    pub max_us: Vec<u64>,
    pub overflows: Vec<u64>,
    /// Per thread, the cycle numbers listed and the count of the others (0 when not written).
    pub overflow_cycles: Vec<(Vec<u64>, u64)>,
}

/// A number printed with `%0<width>…`: at least `width` digits, no padding beyond the width.
fn padded(field: &str, width: usize) -> Result<u64, String> {
    let ok = field.len() >= width
        && field.bytes().all(|b| b.is_ascii_digit())
        && (field.len() == width || !field.starts_with('0'));
    if !ok {
        return Err(format!("'{field}' is not a %0{width} number"));
    }
    field.parse().map_err(|e| format!("'{field}': {e}"))
}

/// `rest` is `threads` times " <%0width number>", nothing else.
fn row(rest: &str, width: usize, threads: usize) -> Result<Vec<u64>, String> {
    let fields = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space after the label: '{rest}'"))?
        .split(' ')
        .map(|f| padded(f, width))
        .collect::<Result<Vec<u64>, String>>()?;
    if fields.len() != threads {
        return Err(format!("{} values, {threads} threads", fields.len()));
    }
    Ok(fields)
}

/// Parses `text` as cyclictest writes it, refusing anything else; errors name the line.
pub(crate) fn parse(text: &str) -> Result<Histogram, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() && lines[i] != "# Histogram" {
        if !lines[i].starts_with("# ") {
            return Err(format!(
                "line {}: '{}' before '# Histogram'",
                i + 1,
                lines[i]
            ));
        }
        i += 1;
    }
    if i == lines.len() {
        return Err("no '# Histogram' line".into());
    }
    i += 1;
    let at = |i: usize| lines.get(i).copied().unwrap_or("<end of file>");
    let mut h = Histogram::default();
    let mut bin = 0u64;
    while !at(i).starts_with('#') && i < lines.len() {
        let err = |e: String| format!("line {}: '{}': {e}", i + 1, lines[i]);
        let (label, counts) = lines[i]
            .split_once(' ')
            .ok_or_else(|| err("no space after the bin".into()))?;
        if padded(label, 6).map_err(err)? != bin {
            return Err(err(format!("bin {bin} expected")));
        }
        let counts = counts
            .split('\t')
            .map(|c| padded(c, 6))
            .collect::<Result<Vec<u64>, String>>()
            .map_err(err)?;
        if h.bins.is_empty() {
            h.bins = vec![Vec::new(); counts.len()];
        }
        if counts.len() != h.bins.len() {
            return Err(err(format!(
                "{} columns, expected {}",
                counts.len(),
                h.bins.len()
            )));
        }
        for (col, c) in h.bins.iter_mut().zip(counts) {
            col.push(c);
        }
        bin += 1;
        i += 1;
    }
    if h.bins.is_empty() {
        return Err("no bin lines".into());
    }
    let threads = h.bins.len();
    for (label, width, field) in [
        ("# Total:", 9, &mut h.total),
        ("# Min Latencies:", 5, &mut h.min_us),
        ("# Avg Latencies:", 5, &mut h.avg_us),
        ("# Max Latencies:", 5, &mut h.max_us),
        ("# Histogram Overflows:", 5, &mut h.overflows),
    ] {
        let rest = at(i)
            .strip_prefix(label)
            .ok_or_else(|| format!("line {}: '{}', expected '{label} …'", i + 1, at(i)))?;
        *field = row(rest, width, threads).map_err(|e| format!("line {}: {e}", i + 1))?;
        i += 1;
    }
    if at(i) != "# Histogram Overflow at cycle number:" {
        return Err(format!(
            "line {}: '{}', expected the overflow cycles",
            i + 1,
            at(i)
        ));
    }
    i += 1;
    for t in 0..threads {
        let err = |e: &str| format!("line {}: '{}': {e}", i + 1, at(i));
        let rest = at(i)
            .strip_prefix(&format!("# Thread {t}:"))
            .ok_or_else(|| err(&format!("expected '# Thread {t}:'")))?;
        let (listed, others) = match rest.split_once(" # ") {
            Some((listed, others)) => {
                let n = others
                    .strip_suffix(" others")
                    .ok_or_else(|| err("expected '# N others'"))?;
                (listed, padded(n, 5).map_err(|e| err(&e))?)
            }
            None => (rest, 0),
        };
        let cycles = if listed.is_empty() {
            Vec::new()
        } else {
            listed
                .strip_prefix(' ')
                .ok_or_else(|| err("no space before a cycle"))?
                .split(' ')
                .map(|c| padded(c, 5))
                .collect::<Result<Vec<u64>, String>>()
                .map_err(|e| err(&e))?
        };
        h.overflow_cycles.push((cycles, others));
        i += 1;
    }
    if let Some(extra) = lines[i.min(lines.len())..].iter().find(|l| !l.is_empty()) {
        return Err(format!("'{extra}' after the last thread's overflow cycles"));
    }
    Ok(h)
}

impl Histogram {
    /// What holds in every file cyclictest writes: the bins sum to `# Total`, and the overflow
    /// cycles listed plus the others are `# Histogram Overflows`.
    pub(crate) fn check_sums(&self) -> Result<(), String> {
        for (t, bins) in self.bins.iter().enumerate() {
            let sum: u64 = bins.iter().sum();
            if sum != self.total[t] {
                return Err(format!(
                    "thread {t}: bins sum to {sum}, # Total {}",
                    self.total[t]
                ));
            }
            let (listed, others) = &self.overflow_cycles[t];
            if listed.len() as u64 + others != self.overflows[t] {
                return Err(format!(
                    "thread {t}: {} cycles listed + {others} others, {} overflows",
                    listed.len(),
                    self.overflows[t]
                ));
            }
        }
        Ok(())
    }
}
