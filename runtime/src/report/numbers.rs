//! Short human-readable numbers for the progress line and the summary table.

/// `value` to `digits` significant digits, trailing zeros dropped; scientific notation outside
/// [1e-3, 1e6) so tiny KLs and large losses stay short.
pub fn significant(value: f64, digits: usize) -> String {
    if !value.is_finite() {
        return format!("{value}").to_lowercase();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    let exponent = value.abs().log10().floor() as i32;
    if !(-3..6).contains(&exponent) {
        return format!("{:.*e}", digits.saturating_sub(1), value);
    }
    let decimals = (digits as i32 - 1 - exponent).max(0) as usize;
    let fixed = format!("{value:.decimals$}");
    if fixed.contains('.') {
        fixed
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        fixed
    }
}

/// A rate with a k/M/G suffix, e.g. `5.1k`.
pub fn rate(per_second: f64) -> String {
    if !per_second.is_finite() {
        return "-".to_string();
    }
    let magnitude = per_second.abs();
    if magnitude < 1e3 {
        format!("{per_second:.0}")
    } else if magnitude < 1e6 {
        format!("{:.1}k", per_second / 1e3)
    } else if magnitude < 1e9 {
        format!("{:.1}M", per_second / 1e6)
    } else {
        format!("{:.1}G", per_second / 1e9)
    }
}

/// A short time: three significant digits in ms below a second (`412 ms`, `1.2 ms`), else in s.
pub fn seconds(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "-".to_string();
    }
    if seconds.abs() < 1.0 {
        format!("{} ms", significant(seconds * 1e3, 3))
    } else {
        format!("{} s", significant(seconds, 3))
    }
}

/// Whole seconds as `m:ss`, or `h:mm:ss` from an hour up.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-:--".to_string();
    }
    let total = seconds.round() as u64;
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits() {
        assert_eq!(significant(0.41249, 3), "0.412");
        assert_eq!(significant(0.0031, 3), "0.0031");
        assert_eq!(significant(1.0, 4), "1");
        assert_eq!(significant(-12.345, 4), "-12.35");
        assert_eq!(significant(0.0, 4), "0");
        assert_eq!(significant(3.1e-5, 3), "3.10e-5");
        assert_eq!(significant(2.5e7, 2), "2.5e7");
        assert_eq!(significant(f64::NAN, 3), "nan");
    }

    #[test]
    fn short_times() {
        assert_eq!(seconds(0.412), "412 ms");
        assert_eq!(seconds(0.0012), "1.2 ms");
        assert_eq!(seconds(2.345), "2.35 s");
        assert_eq!(seconds(f64::NAN), "-");
    }

    #[test]
    fn rates_and_durations() {
        assert_eq!(rate(512.4), "512");
        assert_eq!(rate(5_100.0), "5.1k");
        assert_eq!(rate(2.5e6), "2.5M");
        assert_eq!(rate(f64::INFINITY), "-");
        assert_eq!(duration(42.4), "0:42");
        assert_eq!(duration(3_725.0), "1:02:05");
        assert_eq!(duration(f64::NAN), "-:--");
    }
}
