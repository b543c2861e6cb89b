//! DAPO's additions (not in RL_MATH; as the reference trainer defines them): the soft overlong
//! penalty and the dynamic-sampling filter.

/// `min(−(len − (max_len − buffer)) / buffer · factor, 0)` for a response of `len` tokens.
pub fn overlong_penalty(len: usize, max_len: f64, buffer: f64, factor: f64) -> f64 {
    let exceed = len as f64 - (max_len - buffer);
    (-exceed / buffer * factor).min(0.0)
}

/// For each row: whether its group's scores are not all equal, or the group has one member.
pub fn informative(scores: &[f64], ids: &[i64]) -> Vec<bool> {
    ids.iter()
        .map(|g| {
            let members: Vec<f64> = ids
                .iter()
                .zip(scores)
                .filter(|(h, _)| *h == g)
                .map(|(_, s)| *s)
                .collect();
            members.len() < 2 || members.iter().any(|s| *s != members[0])
        })
        .collect()
}
