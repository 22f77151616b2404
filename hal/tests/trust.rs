//! Which files at a segment's name are believed (LAYOUT.md section 9): a regular file, owned by root, by
//! ourselves or by a user we chose to trust, with no permission bits beyond rw-r-----. Symlinks, FIFOs,
//! loose modes and other owners are refused by readers and by the owner's reclaim path alike, with a
//! message naming the file, its owner and mode, and nothing is read from, written to or removed from them.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{chmod, is_root, shm_path, unique_instance, write_shm, Cleanup};
use rtapi_hal::*;

/// A small HAL with a float param, a float pin and a float signal nobody drives.
fn build(instance: &str) -> Hal {
    let mut b = HalBuilder::new(instance).unwrap();
    let c = b.component("c").unwrap();
    b.param(c, "c.gain", ParamAccess::Rw, 1.5f64).unwrap();
    b.pin::<In, f64>(c, "c.in").unwrap();
    b.signal("s.float", ValueType::Float).unwrap();
    b.build().unwrap()
}

fn untrusted(e: &HalError) -> bool {
    matches!(e, HalError::Untrusted { .. })
}

/// The bytes of a complete segment (as a dead owner would leave it).
fn valid_image() -> Vec<u8> {
    let inst = unique_instance("img");
    let _c = Cleanup(inst.clone());
    let hal = build(&inst);
    let bytes = std::fs::read(shm_path(&inst)).unwrap();
    drop(hal);
    bytes
}

#[test]
fn loose_modes_are_refused_by_readers_and_the_owner() {
    let inst = unique_instance("mode");
    let _c = Cleanup(inst.clone());
    let path = shm_path(&inst);
    let hal = build(&inst);
    let before = std::fs::read(&path).unwrap();

    // What the builder makes is accepted: 0600, and 0640 (group-readable).
    for ok in [0o600, 0o640] {
        chmod(&path, ok);
        HalReader::open(&inst, Access::ReadWrite).unwrap();
    }
    for (mode, says) in [
        (0o666, "other users can access it"),
        (0o644, "other users can access it"),
        (0o602, "other users can access it"),
        (0o660, "group members can write it"),
        (0o700, "execute, setuid, setgid or sticky"),
    ] {
        chmod(&path, mode);
        for access in [Access::ReadOnly, Access::ReadWrite] {
            let e = HalReader::open(&inst, access).err().unwrap();
            let msg = e.to_string();
            assert!(untrusted(&e), "{mode:o}: {e}");
            assert!(
                msg.contains(&path.display().to_string())
                    && msg.contains(&format!("mode {mode:04o}"))
                    && msg.contains(says)
                    && msg.contains(&format!("rm {}", path.display())),
                "{mode:o}: {msg}"
            );
        }
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was written");
    drop(hal);

    // The owner side: a dead owner's complete segment is reclaimed only with a trusted mode.
    let img = valid_image();
    write_shm(&path, &img);
    chmod(&path, 0o666);
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(untrusted(&e) && e.to_string().contains("mode 0666"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), img, "left alone");
    chmod(&path, 0o600);
    drop(HalBuilder::new(&inst).unwrap().build().unwrap());
}

#[test]
fn a_symlink_at_the_segment_name_is_never_followed() {
    let real = unique_instance("real");
    let link = unique_instance("link");
    let (_c1, _c2) = (Cleanup(real.clone()), Cleanup(link.clone()));
    let hal = build(&real);
    let before = std::fs::read(shm_path(&real)).unwrap();
    std::os::unix::fs::symlink(shm_path(&real), shm_path(&link)).unwrap();

    for access in [Access::ReadOnly, Access::ReadWrite] {
        let e = HalReader::open(&link, access).err().unwrap();
        assert!(
            untrusted(&e)
                && e.to_string().contains("symbolic link")
                && e.to_string()
                    .contains(&shm_path(&link).display().to_string()),
            "{e}"
        );
    }
    // The owner neither follows it (O_EXCL|O_NOFOLLOW) nor removes it.
    let e = HalBuilder::new(&link).unwrap().build().err().unwrap();
    assert!(
        untrusted(&e) && e.to_string().contains("symbolic link"),
        "{e}"
    );
    assert!(shm_path(&link).symlink_metadata().unwrap().is_symlink());
    assert_eq!(std::fs::read(shm_path(&real)).unwrap(), before);

    // A dangling link (planted to make the owner create a file somewhere else) is not followed either.
    let target = std::env::temp_dir().join(format!("rtapi-trust-target-{}", std::process::id()));
    let _ = std::fs::remove_file(&target);
    std::fs::remove_file(shm_path(&link)).unwrap();
    std::os::unix::fs::symlink(&target, shm_path(&link)).unwrap();
    let e = HalBuilder::new(&link).unwrap().build().err().unwrap();
    assert!(untrusted(&e), "{e}");
    assert!(!target.exists(), "the link's target was created");
    drop(hal);
}

#[test]
fn a_fifo_or_socket_at_the_segment_name_is_refused_without_hanging() {
    let inst = unique_instance("fifo");
    let _c = Cleanup(inst.clone());
    let path = std::ffi::CString::new(shm_path(&inst).to_str().unwrap()).unwrap();
    // SAFETY: path is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let t0 = Instant::now();
    for access in [Access::ReadOnly, Access::ReadWrite] {
        let e = HalReader::open(&inst, access).err().unwrap();
        assert!(untrusted(&e) && e.to_string().contains("a FIFO"), "{e}");
    }
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(untrusted(&e) && e.to_string().contains("a FIFO"), "{e}");
    // Refused at once; the bound only tells that from hanging on the FIFO's open.
    eprintln!("refused in {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(30));

    // A socket: open(2) fails with ENXIO; refused the same way, naming its owner.
    std::fs::remove_file(shm_path(&inst)).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(shm_path(&inst)).unwrap();
    let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
    let me = std::fs::symlink_metadata(shm_path(&inst)).unwrap().uid();
    assert!(
        untrusted(&e)
            && e.to_string().contains("a socket")
            && e.to_string().contains(&format!("(uid {me})")),
        "{e}"
    );
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(untrusted(&e) && e.to_string().contains("a socket"), "{e}");
}

#[test]
fn another_users_segment_is_believed_only_when_trusted_explicitly() {
    if !is_root() {
        return skip!(
            Ci,
            "only root can give a segment file to another user (chown)"
        );
    }
    let inst = unique_instance("owner");
    let _c = Cleanup(inst.clone());
    let path = shm_path(&inst);
    let hal = build(&inst);
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
    // The name of uid 65534 (`nobody` on Linux distributions).
    let nobody = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"65534"))
        .map_or_else(|| "65534".to_string(), |f| f[0].to_string());

    let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
    let msg = e.to_string();
    assert!(
        matches!(&e, HalError::Untrusted { trust_owner: Some(u), .. } if *u == nobody),
        "{e:?}"
    );
    assert!(
        msg.contains(&format!("{nobody} (uid 65534)"))
            && msg.contains("trusts only segments owned by root")
            && msg.contains(&format!("--trust-owner {nobody}")),
        "{msg}"
    );
    let trusted = Trust::new().also_user(&nobody).unwrap();
    let r = HalReader::open_with(&inst, Access::ReadWrite, &trusted).unwrap();
    assert_eq!(r.get("c.gain").unwrap(), Value::Float(1.5));
    let by_uid = Trust::new().also_user("65534").unwrap();
    assert_eq!(by_uid, trusted);
    assert!(Trust::new().also_user("no-such-user-rtapi").is_err());

    // The owner side refuses it too (as a live owner it would otherwise be "in use").
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(
        untrusted(&e) && e.to_string().contains("(uid 65534)"),
        "{e}"
    );
    assert!(Path::new(&path).exists());
    drop(hal);
}

#[test]
fn non_finite_floats_are_refused_unless_forced() {
    let inst = unique_instance("nan");
    let _c = Cleanup(inst.clone());
    let hal = build(&inst);
    let r = HalReader::open(&inst, Access::ReadWrite).unwrap();
    for text in ["nan", "NaN", "inf", "-inf", "infinity", "1e309", "-1e309"] {
        for name in ["c.gain", "c.in"] {
            let e = r.setp(name, text).unwrap_err();
            assert!(
                matches!(e, HalError::NonFinite { .. }) && e.to_string().contains("--force"),
                "{name} {text}: {e}"
            );
        }
        let e = r.sets("s.float", text).unwrap_err();
        assert!(matches!(e, HalError::NonFinite { .. }), "{text}: {e}");
    }
    assert!(r
        .setp("c.gain", "1e309")
        .unwrap_err()
        .to_string()
        .contains("overflows a float to infinity"));
    assert_eq!(r.get("c.gain").unwrap(), Value::Float(1.5), "unchanged");
    assert_eq!(r.get("s.float").unwrap(), Value::Float(0.0), "unchanged");

    let force = WriteOptions { force: true };
    assert_eq!(
        r.setp_with("c.gain", "inf", force).unwrap(),
        Value::Float(f64::INFINITY)
    );
    assert!(matches!(
        r.sets_with("s.float", "nan", force).unwrap(),
        Value::Float(f) if f.is_nan()
    ));
    // Large but finite values are fine.
    assert_eq!(
        r.setp("c.gain", "1e308").unwrap(),
        Value::Float(1e308),
        "finite"
    );
    drop(hal);
}
