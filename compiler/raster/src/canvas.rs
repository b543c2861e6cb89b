//! A small RGB8 raster: filled rectangles, anti-aliased thick lines and PNG encoding.
//!
//! Only integer and IEEE arithmetic in a fixed order, so the same drawing calls give the same
//! bytes on every machine.

use std::io;

pub type Rgb = [u8; 3];

pub const WHITE: Rgb = [255, 255, 255];

/// Mixes `color` into `base`: `amount` 0 keeps `base`, 1 gives `color`.
pub fn mix(base: Rgb, color: Rgb, amount: f64) -> Rgb {
    let amount = amount.clamp(0.0, 1.0);
    let channel =
        |b: u8, c: u8| (f64::from(b) * (1.0 - amount) + f64::from(c) * amount).round() as u8;
    [
        channel(base[0], color[0]),
        channel(base[1], color[1]),
        channel(base[2], color[2]),
    ]
}

/// A half-open pixel rectangle [x0, x1) × [y0, y1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x0: i64,
    pub y0: i64,
    pub x1: i64,
    pub y1: i64,
}

impl Rect {
    fn contains(&self, x: i64, y: i64) -> bool {
        (self.x0..self.x1).contains(&x) && (self.y0..self.y1).contains(&y)
    }
}

pub struct Canvas {
    width: u32,
    height: u32,
    /// Row-major RGB8, the layout the PNG encoder takes as is.
    pixels: Vec<u8>,
}

impl Canvas {
    pub fn new(width: u32, height: u32, background: Rgb) -> Self {
        let pixels = background.repeat(width as usize * height as usize);
        Self {
            width,
            height,
            pixels,
        }
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    #[cfg(test)]
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    fn bounds(&self) -> Rect {
        Rect {
            x0: 0,
            y0: 0,
            x1: i64::from(self.width),
            y1: i64::from(self.height),
        }
    }

    /// Blends `color` over the pixel at (`x`, `y`) with opacity `alpha`; off-canvas is ignored.
    pub fn blend(&mut self, x: i64, y: i64, color: Rgb, alpha: f64) {
        if !self.bounds().contains(x, y) {
            return;
        }
        let offset = (y as usize * self.width as usize + x as usize) * 3;
        let pixel = &mut self.pixels[offset..offset + 3];
        let mixed = mix([pixel[0], pixel[1], pixel[2]], color, alpha);
        pixel.copy_from_slice(&mixed);
    }

    /// Fills [x0, x1) × [y0, y1), clipped to the canvas.
    pub fn fill_rect(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, color: Rgb) {
        let width = i64::from(self.width);
        let height = i64::from(self.height);
        let (x0, x1) = (x0.clamp(0, width), x1.clamp(0, width));
        let (y0, y1) = (y0.clamp(0, height), y1.clamp(0, height));
        for y in y0..y1 {
            let row = y as usize * self.width as usize;
            for x in x0..x1 {
                let offset = (row + x as usize) * 3;
                self.pixels[offset..offset + 3].copy_from_slice(&color);
            }
        }
    }

    /// Draws a segment `width` pixels thick with round ends, anti-aliased by each pixel's
    /// distance to the segment, and only inside `clip`. A zero-length segment draws a dot.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), width: f64, color: Rgb, clip: Rect) {
        let radius = width / 2.0;
        let reach = radius + 1.0;
        let x_range = (from.0.min(to.0) - reach).floor() as i64..=(from.0.max(to.0) + reach) as i64;
        let y_range = (from.1.min(to.1) - reach).floor() as i64..=(from.1.max(to.1) + reach) as i64;
        for y in y_range {
            for x in x_range.clone() {
                if !clip.contains(x, y) {
                    continue;
                }
                // Pixel (x, y) covers [x, x+1) × [y, y+1); measure from its centre.
                let distance = distance_to_segment((x as f64 + 0.5, y as f64 + 0.5), from, to);
                let coverage = (radius + 0.5 - distance).clamp(0.0, 1.0);
                if coverage > 0.0 {
                    self.blend(x, y, color, coverage);
                }
            }
        }
    }

    pub fn encode_png(&self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(io::Error::other)?;
        writer
            .write_image_data(&self.pixels)
            .map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)?;
        Ok(bytes)
    }
}

fn distance_to_segment(point: (f64, f64), from: (f64, f64), to: (f64, f64)) -> f64 {
    let (dx, dy) = (to.0 - from.0, to.1 - from.1);
    let length_squared = dx * dx + dy * dy;
    let t = if length_squared == 0.0 {
        0.0
    } else {
        (((point.0 - from.0) * dx + (point.1 - from.1) * dy) / length_squared).clamp(0.0, 1.0)
    };
    let (nearest_x, nearest_y) = (from.0 + t * dx, from.1 + t * dy);
    (point.0 - nearest_x).hypot(point.1 - nearest_y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pixel(canvas: &Canvas, x: usize, y: usize) -> Rgb {
        let offset = (y * canvas.width() as usize + x) * 3;
        let p = &canvas.pixels()[offset..offset + 3];
        [p[0], p[1], p[2]]
    }

    #[test]
    fn line_covers_its_path_and_respects_the_clip() {
        let mut canvas = Canvas::new(20, 10, WHITE);
        let clip = Rect {
            x0: 0,
            y0: 0,
            x1: 10,
            y1: 10,
        };
        canvas.line((0.0, 5.0), (20.0, 5.0), 2.0, [0, 0, 0], clip);
        assert_eq!(pixel(&canvas, 5, 5), [0, 0, 0]);
        assert_eq!(pixel(&canvas, 15, 5), WHITE, "outside the clip");
        assert_eq!(pixel(&canvas, 5, 0), WHITE, "far from the line");
    }

    #[test]
    fn drawing_off_the_canvas_is_ignored() {
        let mut canvas = Canvas::new(4, 4, WHITE);
        canvas.fill_rect(-10, -10, 100, 1, [1, 2, 3]);
        canvas.blend(-1, 2, [0, 0, 0], 1.0);
        canvas.blend(4, 2, [0, 0, 0], 1.0);
        assert_eq!(pixel(&canvas, 3, 0), [1, 2, 3]);
        assert_eq!(pixel(&canvas, 3, 1), WHITE);
    }

    #[test]
    fn encodes_a_decodable_png() {
        let canvas = Canvas::new(3, 2, [10, 20, 30]);
        let bytes = canvas.encode_png().unwrap();
        let mut reader = png::Decoder::new(bytes.as_slice()).read_info().unwrap();
        let mut decoded = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut decoded).unwrap();
        assert_eq!((info.width, info.height), (3, 2));
        assert_eq!(&decoded[..info.buffer_size()], canvas.pixels());
    }
}
