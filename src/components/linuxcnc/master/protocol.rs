//! LinuxCNC 2.9's `rtapi_app` socket framing (`uspace_rtapi_app.cc`): a request is `"<argc> "`
//! followed by each argument as `"<len> <bytes>"`; the reply is `"<int> "`. Numbers are decimal
//! ASCII, an optional leading `-`, ended by one space.

use std::io::{Read, Write};

/// The most arguments a request may carry (LinuxCNC's halcmd sends a handful).
pub const MAX_ARGS: usize = 4096;
/// The longest argument accepted.
pub const MAX_ARG_LEN: usize = 1 << 20;

fn read_number(r: &mut impl Read) -> Result<i64, String> {
    let mut n: i64 = 0;
    let mut neg = false;
    let mut digits = 0;
    loop {
        let mut b = [0u8; 1];
        match r.read(&mut b) {
            Ok(0) => return Err("the connection ended inside a number".into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the request: {e}")),
        }
        match b[0] {
            b' ' if digits > 0 => return Ok(if neg { -n } else { n }),
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

/// Reads one request: its arguments.
pub fn read_request(r: &mut impl Read) -> Result<Vec<String>, String> {
    let argc = read_number(r)?;
    let argc = usize::try_from(argc)
        .ok()
        .filter(|&n| n <= MAX_ARGS)
        .ok_or_else(|| format!("a request of {argc} arguments (at most {MAX_ARGS})"))?;
    let mut args = Vec::with_capacity(argc);
    for _ in 0..argc {
        let len = read_number(r)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_ARG_LEN)
            .ok_or_else(|| format!("an argument of {len} bytes (at most {MAX_ARG_LEN})"))?;
        let mut buf = vec![0u8; len];
        r.read_exact(&mut buf)
            .map_err(|e| format!("reading an argument of {len} bytes: {e}"))?;
        args.push(String::from_utf8(buf).map_err(|_| "an argument that is not UTF-8".to_string())?);
    }
    Ok(args)
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
    let n = read_number(r)?;
    i32::try_from(n).map_err(|_| format!("a reply of {n}"))
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
        ] {
            assert!(read_request(&mut &bad[..]).is_err(), "{bad:?}");
        }
    }
}
