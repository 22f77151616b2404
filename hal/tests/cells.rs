//! C-compatible cells (LAYOUT.md section 3): a value occupies only its C width at the slot start, the
//! owner's handles and every reader access exactly those bytes, so a C writer of a `hal_s32_t` (4 bytes)
//! or a `hal_bit_t` (1 byte) is read right whatever the rest of the slot holds.

mod common;

use std::io::{Seek, SeekFrom, Write};

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::layout::{header, pin, table, Table};
use rtapi_hal::*;

/// Offset of pin record `i` in the segment file.
fn pin_record(bytes: &[u8], i: usize) -> usize {
    let d = Table::Pins.descriptor();
    let off = u64::from_ne_bytes(
        bytes[d + table::OFFSET..d + table::OFFSET + 8]
            .try_into()
            .unwrap(),
    );
    let stride = u32::from_ne_bytes(
        bytes[d + table::RECORD_SIZE..d + table::RECORD_SIZE + 4]
            .try_into()
            .unwrap(),
    );
    off as usize + i * stride as usize
}

#[test]
fn narrow_values_use_only_their_bytes_and_foreign_narrow_writes_read_right() {
    let inst = unique_instance("cells");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let s = b.pin::<Io, i32>(c, "c.s32").unwrap();
    let u = b.pin::<Io, u32>(c, "c.u32").unwrap();
    let bit = b.pin::<Io, bool>(c, "c.bit").unwrap();
    let f = b.pin::<Io, f64>(c, "c.float").unwrap();
    let hal = b.build().unwrap();
    let (s, u, bit, f) = (hal.pin(s), hal.pin(u), hal.pin(bit), hal.pin(f));
    s.set(-1);
    u.set(0xdead_beef);
    bit.set(true);
    f.set(-2.5);

    // The file, as another process sees it: exactly the C widths are used.
    let bytes = std::fs::read(shm_path(&inst)).unwrap();
    assert_eq!(&bytes[0..8], b"RTAPIHAL");
    let slot = |i: usize| {
        let at = pin_record(&bytes, i) + pin::VALUE;
        <[u8; 8]>::try_from(&bytes[at..at + 8]).unwrap()
    };
    let mut want = [0u8; 8];
    want[..4].copy_from_slice(&(-1i32).to_ne_bytes());
    assert_eq!(slot(0), want, "an s32 uses the low-addressed 4 bytes only");
    want[..4].copy_from_slice(&0xdead_beefu32.to_ne_bytes());
    assert_eq!(slot(1), want);
    assert_eq!(
        slot(2),
        [1, 0, 0, 0, 0, 0, 0, 0],
        "a bit is the low-addressed byte"
    );
    assert_eq!(slot(3), (-2.5f64).to_ne_bytes());

    // A foreign writer (through the file, the same shared pages) stores narrow values and leaves
    // garbage in the unused bytes: the handles and a reader in this process read exactly the C value.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(&inst))
        .unwrap();
    let mut put = |i: usize, v: [u8; 8]| {
        file.seek(SeekFrom::Start((pin_record(&bytes, i) + pin::VALUE) as u64))
            .unwrap();
        file.write_all(&v).unwrap();
    };
    let mut v = [0xA5u8; 8];
    v[..4].copy_from_slice(&(-7i32).to_ne_bytes());
    put(0, v);
    v[..4].copy_from_slice(&12u32.to_ne_bytes());
    put(1, v);
    put(2, [0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!((s.get(), u.get(), bit.get()), (-7, 12, false));
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert_eq!(r.get("c.s32").unwrap(), Value::S32(-7));
    assert_eq!(r.get("c.u32").unwrap(), Value::U32(12));
    assert_eq!(r.get("c.bit").unwrap(), Value::Bit(false));
    put(2, [2, 0, 0, 0, 0, 0, 0, 0]);
    assert!(bit.get(), "any non-zero byte is true");
    assert_eq!(r.get("c.bit").unwrap(), Value::Bit(true));

    // A reader's setp writes only the type's bytes too: the garbage above the s32 stays.
    let rw = HalReader::open(&inst, Access::ReadWrite).unwrap();
    rw.setp("c.s32", "5").unwrap();
    let now = std::fs::read(shm_path(&inst)).unwrap();
    let at = pin_record(&now, 0) + pin::VALUE;
    assert_eq!(&now[at + 4..at + 8], &[0xA5; 4]);
    assert_eq!(s.get(), 5);
    assert_eq!(now[header::MAGIC], b'R');
}
