//! The timeline as a Gantt chart, in SVG and in PNG (`rlc-raster`): one row per lane (ranks with
//! the same program), one bar per op or offload, coloured by kind, with a time axis and each
//! lane's busy fraction. Numbers are printed with fixed precision and pixels computed in a fixed
//! order, so the same timeline gives the same bytes.

use super::{BarKind, Timeline};
use rlc_raster::canvas::{Canvas, Rgb, WHITE};
use rlc_raster::font::{draw_text, text_width};
use std::fmt::Write as _;

const WIDTH: f64 = 1200.0;
const LABEL: f64 = 150.0;
const RIGHT: f64 = 110.0;
const ROW: f64 = 26.0;
const TOP: f64 = 48.0;

fn rgb(kind: BarKind) -> Rgb {
    match kind {
        BarKind::Generate => [0x4e, 0x79, 0xa7],
        BarKind::Forward => [0x59, 0xa1, 0x4f],
        BarKind::Train => [0xe1, 0x57, 0x59],
        BarKind::Kernel => [0xb0, 0x7a, 0xa1],
        BarKind::Communication => [0xf2, 0x8e, 0x2b],
        BarKind::Offload => [0x9c, 0x75, 0x5f],
        BarKind::Other => [0xba, 0xb0, 0xac],
    }
}

fn colour(kind: BarKind) -> String {
    let [r, g, b] = rgb(kind);
    format!("#{r:02x}{g:02x}{b:02x}")
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
    if s == 0.0 {
        "0 s".to_string()
    } else if s >= 3600.0 {
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

/// Text the bitmap font can draw (it has no `µ` or arrows).
fn ascii(text: &str) -> String {
    text.replace('µ', "u").replace('→', "->").replace('–', "-")
}

/// The same chart as a PNG (the drawing `rlc-raster` can make: rectangles and 5×7 text).
pub fn png(timeline: &Timeline, title: &str) -> std::io::Result<Vec<u8>> {
    const TEXT: Rgb = [0x33, 0x33, 0x33];
    const GRID: Rgb = [0xe0, 0xe0, 0xe0];
    let rows = timeline.lanes.len() as f64;
    let height = (TOP + rows * ROW + 64.0) as u32;
    let mut c = Canvas::new(WIDTH as u32, height, WHITE);
    let span = timeline.step_seconds.max(1e-12);
    let plot = WIDTH - LABEL - RIGHT;
    let x = |t: f64| (LABEL + t / span * plot).round() as i64;
    draw_text(&mut c, LABEL as i64, 12, &ascii(title), 2, TEXT);
    let axis_y = (TOP + rows * ROW) as i64;
    let step = tick_step(span);
    let mut i = 0;
    let mut t = 0.0;
    while t <= span * 1.0001 {
        let px = x(t);
        c.fill_rect(px, TOP as i64, px + 1, axis_y, GRID);
        let label = ascii(&seconds_text(t));
        draw_text(
            &mut c,
            px - text_width(&label, 1) / 2,
            axis_y + 6,
            &label,
            1,
            TEXT,
        );
        i += 1;
        t = step * f64::from(i);
    }
    let utilisation = timeline.utilisation();
    for (row, lane) in timeline.lanes.iter().enumerate() {
        let y = (TOP + row as f64 * ROW) as i64;
        let mut name = format!("ranks {}", lane.ranks);
        // Long rank lists are cut to the label column.
        let room = ((LABEL - 12.0) / 6.0) as usize;
        if name.chars().count() > room {
            name = name
                .chars()
                .take(room.saturating_sub(2))
                .collect::<String>()
                + "..";
        }
        let w = text_width(&name, 1);
        draw_text(&mut c, LABEL as i64 - 8 - w, y + 9, &name, 1, TEXT);
        for bar in &lane.bars {
            let (x0, x1) = (x(bar.start), x(bar.end).max(x(bar.start) + 1));
            c.fill_rect(x0, y + 3, x1, y + ROW as i64 - 3, rgb(bar.kind));
            let label = ascii(&bar.label);
            if x1 - x0 > text_width(&label, 1) + 6 {
                draw_text(&mut c, x0 + 3, y + 9, &label, 1, WHITE);
            }
        }
        let busy = format!("{:.0} % busy", utilisation[row] * 100.0);
        draw_text(&mut c, (WIDTH - RIGHT) as i64 + 8, y + 9, &busy, 1, TEXT);
    }
    let mut lx = LABEL as i64;
    let ly = axis_y + 26;
    for kind in BarKind::ALL {
        c.fill_rect(lx, ly, lx + 12, ly + 12, rgb(kind));
        draw_text(&mut c, lx + 16, ly + 2, kind.label(), 1, TEXT);
        lx += 90;
    }
    c.encode_png()
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
        assert_eq!(seconds_text(0.0), "0 s");
    }

    #[test]
    fn the_png_is_deterministic_and_decodes_to_the_chart_size() {
        use crate::model::RankSet;
        use crate::simulate::{Bar, Lane};
        let timeline = Timeline {
            lanes: vec![Lane {
                ranks: RankSet::range(0, 2),
                bars: vec![Bar {
                    start: 0.0,
                    end: 1.5,
                    label: "policy.train→policy.generate".into(),
                    kind: BarKind::Communication,
                }],
            }],
            step_seconds: 2.0,
            lower_bound: false,
        };
        let a = png(&timeline, "t: 2 µs").unwrap();
        assert_eq!(a, png(&timeline, "t: 2 µs").unwrap());
        // PNG signature, then the IHDR width and height.
        assert_eq!(&a[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(
            u32::from_be_bytes(a[16..20].try_into().unwrap()),
            WIDTH as u32
        );
        assert_eq!(
            u32::from_be_bytes(a[20..24].try_into().unwrap()),
            (TOP + ROW + 64.0) as u32
        );
        assert!(svg(&timeline, "t").contains("policy.train→policy.generate"));
    }
}
