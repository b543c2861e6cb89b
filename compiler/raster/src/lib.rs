//! Pictures without a graphics stack: an RGB8 [`canvas`] (filled rectangles, anti-aliased
//! lines, PNG encoding) and an embedded 5×7 bitmap [`font`]. Integer and IEEE arithmetic in a
//! fixed order only, so the same drawing gives the same bytes everywhere. Used by the runtime's
//! run report (`curves.png`) and by the planner's timeline (`rlc plan --simulate`); it links
//! neither libtorch nor the compiler.

pub mod canvas;
pub mod font;
