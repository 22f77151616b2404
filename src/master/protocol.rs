//! LinuxCNC 2.9's `rtapi_app` socket framing (`uspace_rtapi_app.cc`): a request is `"<argc> "`
//! followed by each argument as `"<len> <bytes>"`; the reply is `"<int> "`. Numbers are decimal
//! ASCII, an optional leading `-`, ended by one space. One request per connection.

use std::io::{Read, Write};

/// The most arguments a request may carry. LinuxCNC 2.9's halcmd sends at most 35 (`MAX_TOK` + 3:
/// `rtapi_app`, the command, the module and its arguments); nearly twice that leaves room for a
/// user's own `rtapi_app load` command line.
pub const MAX_ARGS: usize = 64;
/// The most bytes a whole request may take: halcmd's command line is at most 1024 bytes
/// (`MAX_CMD_LEN`), so sixteen times that is more than LinuxCNC ever sends. The master reads no
/// more than this of one connection.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// What [`parse_request`] found in the bytes read so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole request: its arguments.
    Request(Vec<String>),
    /// Not yet a whole request: read more (and no more than [`MAX_REQUEST_BYTES`] in all).
    Incomplete,
}

/// One number at `buf[*at..]`: `Ok(None)` when the bytes end inside it.
fn parse_number(buf: &[u8], at: &mut usize) -> Result<Option<i64>, String> {
    let mut n: i64 = 0;
    let mut neg = false;
    let mut digits = 0;
    let mut i = *at;
    loop {
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        i += 1;
        match b {
            b' ' if digits > 0 => {
                *at = i;
                return Ok(Some(if neg { -n } else { n }));
            }
            b'-' if digits == 0 && !neg => neg = true,
            c @ b'0'..=b'9' if digits < 10 => {
                n = n * 10 + i64::from(c - b'0');
                digits += 1;
            }
            c => {
                return Err(format!(
                    "not LinuxCNC 2.9's framing: byte 0x{c:02x} where a number was expected"
                ))
            }
        }
    }
}

/// Parses the bytes of one connection read so far: a whole request, more needed, or an error (a
/// malformed request, or one announcing more than [`MAX_ARGS`] arguments or
/// [`MAX_REQUEST_BYTES`] bytes — refused as soon as it says so, before anything is allocated
/// for it).
pub fn parse_request(buf: &[u8]) -> Result<Parsed, String> {
    let incomplete = || {
        if buf.len() > MAX_REQUEST_BYTES {
            Err(format!(
                "a request of more than {MAX_REQUEST_BYTES} bytes (LinuxCNC sends at most a \
                 command line of 1024)"
            ))
        } else {
            Ok(Parsed::Incomplete)
        }
    };
    let mut at = 0;
    let Some(argc) = parse_number(buf, &mut at)? else {
        return incomplete();
    };
    let argc = usize::try_from(argc)
        .ok()
        .filter(|&n| n <= MAX_ARGS)
        .ok_or_else(|| format!("a request of {argc} arguments (at most {MAX_ARGS})"))?;
    let mut args = Vec::with_capacity(argc);
    for _ in 0..argc {
        let Some(len) = parse_number(buf, &mut at)? else {
            return incomplete();
        };
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| at.saturating_add(n) <= MAX_REQUEST_BYTES)
            .ok_or_else(|| {
                format!("an argument of {len} bytes (a request is at most {MAX_REQUEST_BYTES})")
            })?;
        let Some(bytes) = buf.get(at..at + len) else {
            return incomplete();
        };
        at += len;
        args.push(
            String::from_utf8(bytes.to_vec())
                .map_err(|_| "an argument that is not UTF-8".to_string())?,
        );
    }
    if at < buf.len() {
        return Err(format!(
            "{} byte(s) after the request (one request per connection)",
            buf.len() - at
        ));
    }
    Ok(Parsed::Request(args))
}

/// Reads from a blocking reader a byte at a time (nothing past what `parse` takes is consumed)
/// until `parse` finds what it wants in the bytes so far.
fn read_until<T>(
    r: &mut impl Read,
    what: &str,
    mut parse: impl FnMut(&[u8]) -> Result<Option<T>, String>,
) -> Result<T, String> {
    let mut buf = Vec::new();
    loop {
        if let Some(v) = parse(&buf)? {
            return Ok(v);
        }
        let mut b = [0u8; 1];
        match r.read(&mut b) {
            Ok(0) => return Err(format!("the connection ended inside {what}")),
            Ok(_) => buf.push(b[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading {what}: {e}")),
        }
    }
}

/// Reads one request from a blocking reader (a test's or a tool's; the master parses what its
/// event loop has read with [`parse_request`]).
pub fn read_request(r: &mut impl Read) -> Result<Vec<String>, String> {
    read_until(r, "a request", |buf| {
        Ok(match parse_request(buf)? {
            Parsed::Request(a) => Some(a),
            Parsed::Incomplete => None,
        })
    })
}

/// A request as bytes.
pub fn encode_request(args: &[&str]) -> Vec<u8> {
    let mut v = format!("{} ", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("{} ", a.len()).as_bytes());
        v.extend_from_slice(a.as_bytes());
    }
    v
}

/// Writes the reply `rc`.
pub fn write_reply(w: &mut impl Write, rc: i32) -> std::io::Result<()> {
    w.write_all(format!("{rc} ").as_bytes())
}

/// Reads a reply.
pub fn read_reply(r: &mut impl Read) -> Result<i32, String> {
    read_until(r, "the reply", |buf| {
        let mut at = 0;
        parse_number(buf, &mut at)?
            .map(|n| i32::try_from(n).map_err(|_| format!("a reply of {n}")))
            .transpose()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_linuxcncs_framing() {
        let bytes = encode_request(&["load", "siggen", "num_chan=2"]);
        assert_eq!(bytes, b"3 4 load6 siggen10 num_chan=2");
        let got = read_request(&mut &bytes[..]).unwrap();
        assert_eq!(got, ["load", "siggen", "num_chan=2"]);
        let mut out = Vec::new();
        write_reply(&mut out, -22).unwrap();
        assert_eq!(out, b"-22 ");
        assert_eq!(read_reply(&mut &out[..]).unwrap(), -22);
    }

    #[test]
    fn malformed_requests_are_refused() {
        for bad in [
            &b"x"[..],
            b"99999 ",
            b"1 2000000 x",
            b"1 5 ab",
            b"2 1 a",
            b"--1 ",
            b"12345678901 ",
            b"65 ",
            b"1 16385 ",
        ] {
            assert!(read_request(&mut &bad[..]).is_err(), "{bad:?}");
        }
        // What the master has read of a connection: bytes after the request are refused too.
        assert!(parse_request(b"1 1 ab").is_err());
    }

    #[test]
    fn a_request_is_whole_only_when_every_byte_has_come() {
        let bytes = encode_request(&["load", "pid"]);
        for cut in 0..bytes.len() {
            assert_eq!(
                parse_request(&bytes[..cut]),
                Ok(Parsed::Incomplete),
                "{cut}"
            );
        }
        assert_eq!(
            parse_request(&bytes),
            Ok(Parsed::Request(vec!["load".into(), "pid".into()]))
        );
    }

    #[test]
    fn an_announced_size_over_the_bound_is_refused_before_its_bytes_come() {
        // Arguments of 1 MiB announced: refused at the first length, nothing read or kept.
        let e = parse_request(b"64 1048576 ").unwrap_err();
        assert!(e.contains("1048576 bytes"), "{e}");
        let big = vec![b'a'; MAX_REQUEST_BYTES + 1];
        assert!(parse_request(&big).is_err());
    }
}
