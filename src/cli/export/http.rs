//! Just enough HTTP/1.1 for a scraper: read one request head, answer it, close the connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::text::Format;

/// Longest request head read; a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

/// How long a client may take to send its whole request head, and again to read the whole answer:
/// a deadline for all of it, not for each read (a client that sends a byte every second would
/// otherwise hold its connection for hours).
pub(super) const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The time left until `deadline`, `None` once it has passed (a zero socket timeout would mean
/// "block forever").
fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// What a client asked for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub method: String,
    /// The path without its query string.
    pub path: String,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
}

/// Why a request could not be read.
#[derive(Debug)]
pub(super) enum BadRequest {
    /// The connection failed or timed out, or closed before a whole head: nothing to answer.
    Gone,
    /// Not an HTTP request we can read: answer 400 with this reason.
    Malformed(&'static str),
}

/// Reads a request head (up to the blank line) from `stream`, all of it before `deadline`.
pub(super) fn read_request(
    stream: &mut TcpStream,
    deadline: Instant,
) -> Result<Request, BadRequest> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(BadRequest::Malformed("request head too long"));
        }
        let Some(wait) = left(deadline) else {
            return Err(BadRequest::Gone);
        };
        if stream.set_read_timeout(Some(wait)).is_err() {
            return Err(BadRequest::Gone);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(BadRequest::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    parse_head(&buf[..end])
}

/// Parses a request head (without the final blank line).
pub(super) fn parse_head(head: &[u8]) -> Result<Request, BadRequest> {
    let head = std::str::from_utf8(head).map_err(|_| BadRequest::Malformed("not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::Malformed(
            "request line is not METHOD TARGET VERSION",
        ));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(BadRequest::Malformed("only HTTP/1.x is served"));
    }
    let mut accept: Option<String> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(BadRequest::Malformed("header line without a colon"));
        };
        if name.trim().eq_ignore_ascii_case("accept") {
            // Repeated headers are one comma-separated list.
            let v = value.trim();
            accept = Some(match accept {
                Some(a) => format!("{a},{v}"),
                None => v.to_string(),
            });
        }
    }
    let path = target.split(['?', '#']).next().unwrap_or("").to_string();
    Ok(Request {
        method: method.to_string(),
        path,
        accept,
    })
}

/// The `q` a media range list gives `wanted` (`type/subtype`): the most specific matching range
/// wins (`type/subtype` over `type/*` over `*/*`); 0 if none matches.
fn quality(accept: &str, wanted: &str) -> f64 {
    let (wtype, _) = wanted.split_once('/').unwrap_or((wanted, ""));
    let mut best: Option<(u8, f64)> = None;
    for range in accept.split(',') {
        let mut params = range.split(';');
        let media = params.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = 1.0;
        for p in params {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = v.trim().parse::<f64>().unwrap_or(0.0).clamp(0.0, 1.0);
                }
            }
        }
        let specificity = if media == wanted {
            3
        } else if media.strip_suffix("/*") == Some(wtype) {
            2
        } else if media == "*/*" {
            1
        } else {
            continue;
        };
        match best {
            Some((s, bq)) if s > specificity || (s == specificity && bq >= q) => {}
            _ => best = Some((specificity, q)),
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

/// The format the `Accept` header asks for: OpenMetrics when it accepts
/// `application/openmetrics-text` at least as much as `text/plain`, the Prometheus text format
/// otherwise (and when there is no header).
pub(super) fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Prometheus;
    };
    let om = quality(accept, "application/openmetrics-text");
    let explicit_om = accept
        .to_ascii_lowercase()
        .contains("application/openmetrics-text");
    if explicit_om && om > 0.0 && om >= quality(accept, "text/plain") {
        Format::OpenMetrics
    } else {
        Format::Prometheus
    }
}

/// A response to write.
pub(super) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Extra header lines (`Name: value`).
    pub headers: Vec<String>,
}

impl Response {
    /// A plain-text answer.
    pub(super) fn text(status: u16, body: String) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
            headers: Vec::new(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Writes `r` (without the body for HEAD), all of it before `deadline`, and closes the connection.
pub(super) fn write_response(
    stream: &mut TcpStream,
    r: &Response,
    head_only: bool,
    deadline: Instant,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for h in &r.headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&r.body);
    }
    let mut rest = out.as_bytes();
    while !rest.is_empty() {
        let wait = left(deadline).ok_or(std::io::ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(wait))?;
        match stream.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads() {
        let r = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\naccept: text/plain\r\nAccept: */*;q=0.1",
        )
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.accept.as_deref(), Some("text/plain,*/*;q=0.1"));
        assert!(matches!(
            parse_head(b"GET /metrics"),
            Err(BadRequest::Malformed(_))
        ));
        assert!(matches!(
            parse_head(b"GET / SPDY/3"),
            Err(BadRequest::Malformed(_))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.0\r\nnonsense"),
            Err(BadRequest::Malformed(_))
        ));
    }

    #[test]
    fn content_negotiation() {
        // What Prometheus 2.x sends.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate(None), Format::Prometheus);
        assert_eq!(negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(negotiate(Some("text/plain")), Format::Prometheus);
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("text/plain,application/openmetrics-text;q=0.5")),
            Format::Prometheus
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0")),
            Format::Prometheus
        );
    }
}
