//! `curves.png`: one panel per metric against step, stacked under a title.
//!
//! Each panel has its own y scale (reward and KL differ by orders of magnitude), a light grid at
//! round tick values, numbered axes and a legend. Noisy metrics get a moving average drawn over
//! a faded raw line, so the trend is readable without hiding the spread.

use std::fs;
use std::io;
use std::path::Path;

use super::canvas::{Canvas, Rect, Rgb, WHITE, mix};
use super::font::{draw_text, text_height, text_width};
use super::metrics::Series;

pub const WIDTH: u32 = 800;
pub const PANEL_HEIGHT: u32 = 480;
const TITLE_HEIGHT: u32 = 44;

/// Plot area inside a panel, in pixels from the panel's left and top edges.
const AREA_LEFT: i64 = 110;
const AREA_RIGHT: i64 = 24;
const AREA_TOP: i64 = 40;
const AREA_BOTTOM: i64 = 60;

/// Gap in pixels between the frame and the axis ends.
const INSET: f64 = 6.0;
const TEXT_SCALE: i64 = 2;
const X_TICKS: usize = 8;
const Y_TICKS: usize = 6;

/// Fewer finite points than this are drawn raw: a moving average of a handful says nothing.
const MIN_SMOOTHED_POINTS: usize = 10;

const TEXT: Rgb = [40, 40, 40];
const AXIS: Rgb = [110, 110, 110];
const GRID: Rgb = [230, 230, 230];
/// The "tab10" palette: distinct and readable on white.
const PALETTE: [Rgb; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// The image's size for `metric_count` metrics (an empty run still gets one panel).
pub fn image_size(metric_count: usize) -> (u32, u32) {
    let panels = metric_count.max(1) as u32;
    (WIDTH, TITLE_HEIGHT + PANEL_HEIGHT * panels)
}

/// Renders the curves and writes them to `path` as a PNG.
pub fn write(path: &Path, title: &str, steps: &[u64], series: &[Series]) -> io::Result<()> {
    fs::write(path, render(title, steps, series).encode_png()?)
}

/// Draws every series (each parallel to `steps`) in its own panel.
pub fn render(title: &str, steps: &[u64], series: &[Series]) -> Canvas {
    let (width, height) = image_size(series.len());
    let mut canvas = Canvas::new(width, height, WHITE);

    // Large when it fits, smaller for long titles rather than cutting them off.
    let title_scale = if text_width(title, 3) <= i64::from(WIDTH) - 40 {
        3
    } else {
        2
    };
    let title_x = (i64::from(WIDTH) - text_width(title, title_scale)).max(0) / 2;
    let title_y = (i64::from(TITLE_HEIGHT) - text_height(title_scale)) / 2;
    draw_text(&mut canvas, title_x, title_y, title, title_scale, TEXT);

    let first = steps.first().map_or(0.0, |&s| s as f64);
    let last = steps.last().map_or(0.0, |&s| s as f64);
    // All panels share the step axis so they line up; one step still spans one unit.
    let x_axis = Axis::new(first, last.max(first + 1.0), X_TICKS, true);

    if series.is_empty() {
        let message = if steps.is_empty() {
            "no steps recorded"
        } else {
            "no metrics logged"
        };
        let area = panel_area(i64::from(TITLE_HEIGHT));
        draw_frame(&mut canvas, area);
        draw_centered_message(&mut canvas, area, message);
    }
    for (index, one) in series.iter().enumerate() {
        let top = i64::from(TITLE_HEIGHT + PANEL_HEIGHT * index as u32);
        let color = PALETTE[index % PALETTE.len()];
        draw_panel(&mut canvas, top, steps, one, color, &x_axis);
    }
    canvas
}

fn panel_area(top: i64) -> Rect {
    Rect {
        x0: AREA_LEFT,
        y0: top + AREA_TOP,
        x1: i64::from(WIDTH) - AREA_RIGHT,
        y1: top + i64::from(PANEL_HEIGHT) - AREA_BOTTOM,
    }
}

fn draw_panel(
    canvas: &mut Canvas,
    top: i64,
    steps: &[u64],
    series: &Series,
    color: Rgb,
    x_axis: &Axis,
) {
    let area = panel_area(top);
    let finite = || series.values.iter().copied().filter(|v| v.is_finite());
    let low = finite().reduce(f64::min).unwrap_or(f64::NAN);
    let high = finite().reduce(f64::max).unwrap_or(f64::NAN);
    let y_axis = Axis::new(low, high, Y_TICKS, false);
    let to_pixel = |step: u64, value: f64| {
        (
            area_x(area, x_axis.fraction(step as f64)),
            area_y(area, y_axis.fraction(value)),
        )
    };

    draw_grid_and_ticks(canvas, area, x_axis, &y_axis);

    let smoothing = is_noisy(&series.values).then(|| smoothing_window(finite().count()));
    let raw_color = if smoothing.is_some() {
        mix(color, WHITE, 0.6)
    } else {
        color
    };
    let raw: Vec<Option<(f64, f64)>> = steps
        .iter()
        .zip(&series.values)
        .map(|(&step, &value)| value.is_finite().then(|| to_pixel(step, value)))
        .collect();
    draw_polyline(canvas, area, &raw, 1.5, raw_color);
    let mut legend = vec![(series.name.clone(), raw_color)];
    if let Some(window) = smoothing {
        let smoothed: Vec<Option<(f64, f64)>> = steps
            .iter()
            .zip(moving_average(&series.values, window))
            .map(|(&step, value)| value.is_finite().then(|| to_pixel(step, value)))
            .collect();
        draw_polyline(canvas, area, &smoothed, 2.5, color);
        legend.push((format!("{} ({window}-step mean)", series.name), color));
    }
    if raw.iter().all(Option::is_none) {
        draw_centered_message(canvas, area, "no finite values");
    }

    draw_frame(canvas, area);
    draw_legend(canvas, area.x0, top + 12, &legend);
}

/// Pixel x of a fraction along the plot area. The axis ends sit `INSET` inside the frame so
/// lines and dots at the extremes are not hidden under it.
fn area_x(area: Rect, fraction: f64) -> f64 {
    area.x0 as f64 + INSET + fraction * ((area.x1 - area.x0) as f64 - 2.0 * INSET)
}

/// Pixel y of a fraction up the plot area (0 at the bottom).
fn area_y(area: Rect, fraction: f64) -> f64 {
    area.y1 as f64 - INSET - fraction * ((area.y1 - area.y0) as f64 - 2.0 * INSET)
}

fn draw_grid_and_ticks(canvas: &mut Canvas, area: Rect, x_axis: &Axis, y_axis: &Axis) {
    let label_height = text_height(TEXT_SCALE);
    for &tick in &x_axis.ticks {
        let x = area_x(area, x_axis.fraction(tick)).floor() as i64;
        canvas.fill_rect(x, area.y0, x + 1, area.y1, GRID);
        canvas.fill_rect(x, area.y1, x + 1, area.y1 + 5, AXIS);
        let label = x_axis.label(tick);
        let label_x = x - text_width(&label, TEXT_SCALE) / 2;
        draw_text(canvas, label_x, area.y1 + 10, &label, TEXT_SCALE, TEXT);
    }
    for &tick in &y_axis.ticks {
        let y = area_y(area, y_axis.fraction(tick)).floor() as i64;
        canvas.fill_rect(area.x0, y, area.x1, y + 1, GRID);
        canvas.fill_rect(area.x0 - 5, y, area.x0, y + 1, AXIS);
        let label = y_axis.label(tick);
        let label_x = area.x0 - 9 - text_width(&label, TEXT_SCALE);
        draw_text(
            canvas,
            label_x,
            y - label_height / 2,
            &label,
            TEXT_SCALE,
            TEXT,
        );
    }
    let name_x = (area.x0 + area.x1 - text_width("step", TEXT_SCALE)) / 2;
    draw_text(canvas, name_x, area.y1 + 34, "step", TEXT_SCALE, TEXT);
}

fn draw_frame(canvas: &mut Canvas, area: Rect) {
    let Rect { x0, y0, x1, y1 } = area;
    canvas.fill_rect(x0, y0, x1, y0 + 1, AXIS);
    canvas.fill_rect(x0, y1 - 1, x1, y1, AXIS);
    canvas.fill_rect(x0, y0, x0 + 1, y1, AXIS);
    canvas.fill_rect(x1 - 1, y0, x1, y1, AXIS);
}

fn draw_centered_message(canvas: &mut Canvas, area: Rect, message: &str) {
    let x = (area.x0 + area.x1 - text_width(message, TEXT_SCALE)) / 2;
    let y = (area.y0 + area.y1 - text_height(TEXT_SCALE)) / 2;
    draw_text(canvas, x, y, message, TEXT_SCALE, AXIS);
}

/// A swatch and a label per entry, left to right from (`x`, `y`).
fn draw_legend(canvas: &mut Canvas, mut x: i64, y: i64, entries: &[(String, Rgb)]) {
    let middle = (y + text_height(TEXT_SCALE) / 2) as f64;
    let everywhere = Rect {
        x0: 0,
        y0: 0,
        x1: i64::from(canvas.width()),
        y1: i64::from(canvas.height()),
    };
    for (label, color) in entries {
        canvas.line(
            (x as f64 + 2.0, middle),
            (x as f64 + 22.0, middle),
            3.0,
            *color,
            everywhere,
        );
        draw_text(canvas, x + 30, y, label, TEXT_SCALE, TEXT);
        x += 30 + text_width(label, TEXT_SCALE) + 24;
    }
}

/// Joins consecutive points; `None` (a null metric) breaks the line, and a point with no
/// neighbour on either side is drawn as a dot so it does not vanish.
fn draw_polyline(
    canvas: &mut Canvas,
    area: Rect,
    points: &[Option<(f64, f64)>],
    width: f64,
    color: Rgb,
) {
    for (index, point) in points.iter().enumerate() {
        let Some(point) = *point else { continue };
        let previous = index.checked_sub(1).and_then(|i| points[i]);
        let next = points.get(index + 1).copied().flatten();
        match previous {
            Some(previous) => canvas.line(previous, point, width, color, area),
            None if next.is_none() => canvas.line(point, point, width + 3.0, color, area),
            None => {}
        }
    }
}

/// A series zigzags when its total variation is well above its range: a monotone or gently
/// curving line has variation close to its range, so smoothing it would only add clutter.
fn is_noisy(values: &[f64]) -> bool {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.len() < MIN_SMOOTHED_POINTS {
        return false;
    }
    let low = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let high = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let variation: f64 = finite
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).abs())
        .sum();
    high > low && variation > 3.0 * (high - low)
}

/// An odd window about a tenth of the run: long enough to show the trend, short enough to
/// follow it.
fn smoothing_window(points: usize) -> usize {
    (points / 20).max(1) * 2 + 1
}

/// Centred moving average over the finite values in each window (shrunk at the ends). Points
/// that are themselves null stay null, so gaps stay visible.
fn moving_average(values: &[f64], window: usize) -> Vec<f64> {
    // Prefix sums keep this linear in the run length whatever the window.
    let mut sums = vec![0.0; values.len() + 1];
    let mut counts = vec![0usize; values.len() + 1];
    for (index, &value) in values.iter().enumerate() {
        let finite = value.is_finite();
        sums[index + 1] = sums[index] + if finite { value } else { 0.0 };
        counts[index + 1] = counts[index] + usize::from(finite);
    }
    let half = window / 2;
    (0..values.len())
        .map(|index| {
            if !values[index].is_finite() {
                return f64::NAN;
            }
            let start = index.saturating_sub(half);
            let end = (index + half + 1).min(values.len());
            (sums[end] - sums[start]) / (counts[end] - counts[start]) as f64
        })
        .collect()
}

/// An axis whose ends are round tick values enclosing the data.
#[derive(Debug, Clone, PartialEq)]
struct Axis {
    low: f64,
    high: f64,
    step: f64,
    ticks: Vec<f64>,
}

impl Axis {
    /// Ticks 1, 2 or 5 × 10^k apart, about `target` of them; `integer` keeps the spacing at
    /// least 1 (steps are whole). Empty or flat data still gets a usable range.
    fn new(low: f64, high: f64, target: usize, integer: bool) -> Self {
        let usable = low.is_finite() && high.is_finite() && (high - low).is_finite();
        let (low, high) = if !usable {
            (0.0, 1.0)
        } else if low == high {
            let pad = if low == 0.0 { 1.0 } else { low.abs() * 0.1 };
            (low - pad, high + pad)
        } else {
            (low, high)
        };
        let rough = (high - low) / target as f64;
        let magnitude = 10f64.powi(rough.log10().floor() as i32);
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|multiple| multiple * magnitude)
            .find(|step| *step >= rough)
            .unwrap_or(10.0 * magnitude);
        let step = if integer { step.max(1.0) } else { step };
        let first = (low / step).floor() as i64;
        let last = (high / step).ceil() as i64;
        // Subnormal or float-precision-limited ranges defeat the arithmetic above; such data
        // is drawn clipped rather than hanging on billions of ticks.
        if !(step.is_finite() && step > 0.0) || last.saturating_sub(first) > 100 {
            return Self::new(0.0, 1.0, target, integer);
        }
        // Multiples of the index rather than repeated addition, so ticks land on round values.
        let ticks = (first..=last).map(|index| index as f64 * step).collect();
        Self {
            low: first as f64 * step,
            high: last as f64 * step,
            step,
            ticks,
        }
    }

    fn fraction(&self, value: f64) -> f64 {
        (value - self.low) / (self.high - self.low)
    }

    /// A tick's text with just enough digits to tell it from its neighbours.
    fn label(&self, tick: f64) -> String {
        if tick.abs() < self.step * 1e-6 {
            return "0".to_string();
        }
        let step_exponent = self.step.log10().floor() as i32;
        let tick_exponent = tick.abs().log10().floor() as i32;
        if tick_exponent >= 6 || step_exponent <= -5 {
            let digits = (tick_exponent - step_exponent).clamp(0, 6) as usize;
            format!("{tick:.digits$e}")
        } else {
            let decimals = (-step_exponent).max(0) as usize;
            format!("{tick:.decimals$}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ticks_are_round_and_enclose_the_data() {
        let axis = Axis::new(0.013, 0.87, 6, false);
        assert_eq!(axis.step, 0.2);
        assert_eq!((axis.low, axis.high), (0.0, 1.0));
        let labels: Vec<String> = axis.ticks.iter().map(|&t| axis.label(t)).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]);

        let steps = Axis::new(0.0, 3.0, 8, true);
        assert_eq!(steps.step, 1.0);
        assert_eq!(steps.label(2.0), "2");
    }

    #[test]
    fn axis_labels_switch_to_exponents_for_tiny_and_huge_values() {
        let tiny = Axis::new(0.0, 4e-5, 6, false);
        assert_eq!(tiny.label(tiny.ticks[1]), "1e-5");
        let huge = Axis::new(0.0, 3e7, 6, false);
        assert_eq!(huge.label(5e6), "5e6");
        assert_eq!(huge.label(1.5e7), "1.5e7");
    }

    #[test]
    fn flat_empty_and_infinite_data_still_get_an_axis() {
        for (low, high) in [
            (2.0, 2.0),
            (0.0, 0.0),
            (f64::NAN, f64::NAN),
            (-1e308, 1e308),
            (0.0, 5e-324),
            (1e16, 1e16 + 2.0),
        ] {
            let axis = Axis::new(low, high, 6, false);
            assert!(axis.high > axis.low, "{low} {high}: {axis:?}");
            assert!(axis.ticks.len() >= 2 && axis.ticks.len() <= 12, "{axis:?}");
        }
    }

    #[test]
    fn noise_detection_and_moving_average() {
        let zigzag: Vec<f64> = (0..40).map(|i| f64::from(i % 2)).collect();
        let ramp: Vec<f64> = (0..40).map(f64::from).collect();
        assert!(is_noisy(&zigzag));
        assert!(!is_noisy(&ramp));
        assert!(!is_noisy(&zigzag[..5]));

        let values = [1.0, f64::NAN, 3.0, 5.0];
        let smoothed = moving_average(&values, 3);
        assert_eq!(smoothed[0], 1.0);
        assert!(smoothed[1].is_nan());
        assert_eq!(smoothed[2], 4.0);
        assert_eq!(smoothed[3], 4.0);
        assert_eq!(smoothing_window(10), 3);
        assert_eq!(smoothing_window(100), 11);
    }

    #[test]
    fn one_panel_per_metric_and_at_least_one() {
        assert_eq!(image_size(0), (800, 524));
        assert_eq!(image_size(2), (800, 1004));
        let canvas = render("x", &[], &[]);
        assert_eq!((canvas.width(), canvas.height()), image_size(0));
    }
}
