//! Days since 1970-01-01 as a civil date (the proleptic Gregorian calendar), without a date crate:
//! the flight recorder's dump names and, through `#[path]`, the build script's build date.

/// The (year, month 1–12, day 1–31) that is `days` after 1970-01-01 (negative: before it).
pub(crate) fn from_days(days: i64) -> (i64, i64, i64) {
    // Eras of 400 years (146 097 days) counted from 0000-03-01, so that a leap day ends its year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}
