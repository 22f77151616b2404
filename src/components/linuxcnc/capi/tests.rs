use super::*;
use std::ffi::CString;

fn split(s: &str) -> (Vec<String>, c_int) {
    let c = CString::new(s).unwrap();
    let mut argc = -1;
    // SAFETY: a C string and a writable count.
    let argv = unsafe { rtapi_argv_split(0, c.as_ptr(), &mut argc) };
    assert!(!argv.is_null());
    let mut words = Vec::new();
    // SAFETY: a NULL-terminated array of C strings from rtapi_argv_split, freed once below.
    unsafe {
        let mut i = 0;
        while !(*argv.add(i)).is_null() {
            words.push(CStr::from_ptr(*argv.add(i)).to_str().unwrap().to_string());
            i += 1;
        }
        rtapi_argv_free(argv);
    }
    (words, argc)
}

#[test]
fn argv_split_splits_on_whitespace_into_a_null_terminated_array() {
    assert_eq!(
        split("  num_encoders=2 \t num_stepgens=3\nsserial_port_0=0000  "),
        (
            vec![
                "num_encoders=2".to_string(),
                "num_stepgens=3".into(),
                "sserial_port_0=0000".into()
            ],
            3
        )
    );
    assert_eq!(split(""), (vec![], 0));
    assert_eq!(split(" \t "), (vec![], 0));
    // A null string is no words; a null count is allowed.
    // SAFETY: null arguments are part of the contract.
    let argv = unsafe { rtapi_argv_split(0, std::ptr::null(), std::ptr::null_mut()) };
    assert!(!argv.is_null());
    // SAFETY: the array from rtapi_argv_split: its first slot, then freed once.
    unsafe {
        assert!((*argv).is_null());
        rtapi_argv_free(argv);
        rtapi_argv_free(std::ptr::null_mut());
    }
}

fn request(name: &str) -> (c_int, *const RtapiFirmware) {
    let c = CString::new(name).unwrap();
    let mut fw: *const RtapiFirmware = std::ptr::NonNull::dangling().as_ptr();
    // SAFETY: a writable result pointer and a C string.
    let r = unsafe { rtapi_request_firmware(&mut fw, c.as_ptr(), std::ptr::null_mut()) };
    (r, fw)
}

#[test]
fn firmware_is_read_from_lib_firmware_or_named_missing() {
    let (r, fw) = request("rtapi-test/no-such-firmware.bit");
    assert_eq!(r, -libc::ENOENT);
    assert!(fw.is_null());
    for bad in ["/etc/passwd", "../etc/passwd", "hm2/../../etc/passwd", ""] {
        assert_eq!(request(bad).0, -libc::EINVAL, "{bad}");
    }
    // Any file Debian ships under /lib/firmware, read back whole.
    let Some(file) = std::fs::read_dir(FIRMWARE_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_file()))
    else {
        eprintln!("no file under {FIRMWARE_DIR}: the read is not checked");
        return;
    };
    let name = file.file_name().to_string_lossy().into_owned();
    let (r, fw) = request(&name);
    assert_eq!(r, 0, "{name}");
    let want = std::fs::read(file.path()).unwrap();
    // SAFETY: a firmware from rtapi_request_firmware: `size` bytes at `data`; released once.
    unsafe {
        let got = std::slice::from_raw_parts((*fw).data, (*fw).size);
        assert_eq!(got, &want[..]);
        rtapi_release_firmware(fw);
        rtapi_release_firmware(std::ptr::null());
    }
}

#[test]
fn task_self_off_the_rt_threads_is_einval() {
    assert_eq!(rtapi_task_self(), -libc::EINVAL);
}

#[test]
fn param_alias_removal_succeeds_and_an_alias_is_refused() {
    let n = CString::new("x.param").unwrap();
    let a = CString::new("x.alias").unwrap();
    // SAFETY: C strings, or null for "remove the alias".
    unsafe {
        assert_eq!(hal_param_alias(n.as_ptr(), std::ptr::null()), 0);
        assert_eq!(hal_param_alias(n.as_ptr(), a.as_ptr()), -libc::ENOSYS);
    }
}

#[test]
fn parport_without_a_structure_or_a_linux_port_fails() {
    let m = CString::new("test").unwrap();
    // SAFETY: a C string; a null port is refused before any use.
    let r = unsafe { rtapi_parport_get(m.as_ptr(), std::ptr::null_mut(), 0x378, 0, 0) };
    assert_eq!(r, -libc::EINVAL);
    let mut port = RtapiParport {
        base: 1,
        base_hi: 1,
        fd: 7,
    };
    // Linux parport 15: no such port on any test machine.
    // SAFETY: a C string and a writable port structure.
    let r = unsafe { rtapi_parport_get(m.as_ptr(), &mut port, 15, 0, 0) };
    assert_eq!(r, -libc::ENODEV);
    assert_eq!((port.base, port.base_hi, port.fd), (0, 0, -1));
    // SAFETY: a cleared port structure; releasing it does nothing.
    unsafe { rtapi_parport_release(&mut port) };
}

#[test]
fn simple_strtol_is_strtol() {
    let s = CString::new("0x7i92").unwrap();
    let mut end: *mut c_char = std::ptr::null_mut();
    // SAFETY: a C string and a writable end pointer.
    let v = unsafe { simple_strtol(s.as_ptr(), &mut end, 0) };
    assert_eq!(v, 7);
    // SAFETY: `end` points into `s`.
    assert_eq!(unsafe { end.offset_from(s.as_ptr()) }, 3);
}
