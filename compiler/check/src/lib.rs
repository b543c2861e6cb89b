//! Name resolution, types and the static RLHF checks (issue 3).
