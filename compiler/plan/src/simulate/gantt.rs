//! The timeline as an SVG Gantt chart: one row per lane (ranks with the same program), one bar
//! per op or offload, coloured by kind, with a time axis. Numbers are printed with fixed
//! precision, so the same timeline gives the same bytes.

use super::{BarKind, Timeline};
use std::fmt::Write as _;

const WIDTH: f64 = 1200.0;
const LABEL: f64 = 150.0;
const RIGHT: f64 = 110.0;
const ROW: f64 = 26.0;
const TOP: f64 = 48.0;

fn colour(kind: BarKind) -> &'static str {
    match kind {
        BarKind::Generate => "#4e79a7",
        BarKind::Forward => "#59a14f",
        BarKind::Train => "#e15759",
        BarKind::Kernel => "#b07aa1",
        BarKind::Communication => "#f28e2b",
        BarKind::Offload => "#9c755f",
        BarKind::Other => "#bab0ac",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round tick interval: 1, 2 or 5 times a power of ten, about `span / 6`.
pub fn tick_step(span: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / 6.0;
    let power = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * power >= raw {
            return m * power;
        }
    }
    10.0 * power
}

/// Seconds with a unit that suits them.
pub fn seconds_text(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.2} h", s / 3600.0)
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// The chart: `title` on top, utilisation at the end of each row, a legend at the bottom.
pub fn svg(timeline: &Timeline, title: &str) -> String {
    let rows = timeline.lanes.len() as f64;
    let height = TOP + rows * ROW + 64.0;
    let span = timeline.step_seconds.max(1e-12);
    let plot = WIDTH - LABEL - RIGHT;
    let x = |t: f64| LABEL + t / span * plot;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="#ffffff"/><text x="{LABEL:.0}" y="20" font-size="14" font-weight="bold">{}</text>"##,
        escape(title)
    );
    // Time axis.
    let step = tick_step(span);
    let axis_y = TOP + rows * ROW;
    let mut t = 0.0;
    let mut i = 0;
    while t <= span * 1.0001 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{TOP:.1}" x2="{0:.1}" y2="{axis_y:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2}</text>"##,
            x(t),
            axis_y + 14.0,
            escape(&seconds_text(t))
        );
        i += 1;
        t = step * f64::from(i);
    }
    let utilisation = timeline.utilisation();
    for (row, lane) in timeline.lanes.iter().enumerate() {
        let y = TOP + row as f64 * ROW;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">ranks {}</text>"##,
            LABEL - 8.0,
            y + ROW / 2.0 + 4.0,
            escape(&lane.ranks.to_string())
        );
        for bar in &lane.bars {
            let (x0, x1) = (x(bar.start), x(bar.end));
            let w = (x1 - x0).max(0.5);
            let _ = write!(
                s,
                r#"<rect x="{x0:.2}" y="{:.1}" width="{w:.2}" height="{:.1}" fill="{}"><title>{} {} – {}</title></rect>"#,
                y + 3.0,
                ROW - 6.0,
                colour(bar.kind),
                escape(&bar.label),
                escape(&seconds_text(bar.start)),
                escape(&seconds_text(bar.end)),
            );
            // A label where it fits (about 6 px per character).
            if w > 6.0 * bar.label.chars().count() as f64 + 6.0 {
                let _ = write!(
                    s,
                    r##"<text x="{:.2}" y="{:.1}" fill="#ffffff">{}</text>"##,
                    x0 + 3.0,
                    y + ROW / 2.0 + 4.0,
                    escape(&bar.label)
                );
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{:.0} % busy</text>"#,
            WIDTH - RIGHT + 8.0,
            y + ROW / 2.0 + 4.0,
            utilisation[row] * 100.0
        );
    }
    // Legend.
    let mut lx = LABEL;
    let ly = axis_y + 34.0;
    for kind in BarKind::ALL {
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            ly - 10.0,
            colour(kind),
            lx + 16.0,
            kind.label()
        );
        lx += 90.0;
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(12.0), 2.0);
        assert_eq!(tick_step(0.9), 0.2);
        assert_eq!(tick_step(700.0), 200.0);
        assert_eq!(seconds_text(0.0123), "12.30 ms");
        assert_eq!(seconds_text(7200.0), "2.00 h");
    }
}
