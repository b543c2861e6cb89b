//! Which argument of a call gives each parameter: positional arguments fill the parameters in
//! order, named ones their own. The checker's calls (`eval::calls::bind_args`), the dataflow's
//! recipe instances and kernel lowering (and the reference evaluator through it) all bind with
//! [`match_args`], so a call means the same to each of them.

/// What is wrong with one argument of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// A positional argument past the last parameter.
    Surplus { arg: usize },
    /// A name no parameter has.
    Unknown { arg: usize },
    /// A second argument for parameter `param`, whose first was argument `first`.
    Repeated {
        arg: usize,
        first: usize,
        param: usize,
    },
}

/// Each parameter's argument (an index into the call's arguments, `None` where it is left out)
/// and the arguments that give none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched {
    pub slots: Vec<Option<usize>>,
    pub issues: Vec<Issue>,
}

/// Matches a call's arguments, given by their names (`None` for a positional one), to the
/// parameters named `params`.
pub fn match_args(params: &[&str], names: &[Option<&str>]) -> Matched {
    let mut slots: Vec<Option<usize>> = vec![None; params.len()];
    let mut issues = Vec::new();
    let mut positional = 0;
    for (arg, name) in names.iter().enumerate() {
        let param = match name {
            None => {
                positional += 1;
                Some(positional - 1).filter(|&p| p < params.len())
            }
            Some(n) => params.iter().position(|p| p == n),
        };
        match param {
            None if name.is_none() => issues.push(Issue::Surplus { arg }),
            None => issues.push(Issue::Unknown { arg }),
            Some(param) => match slots[param] {
                Some(first) => issues.push(Issue::Repeated { arg, first, param }),
                None => slots[param] = Some(arg),
            },
        }
    }
    Matched { slots, issues }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_then_named() {
        let m = match_args(&["a", "b", "c"], &[None, Some("c")]);
        assert_eq!(m.slots, [Some(0), None, Some(1)]);
        assert!(m.issues.is_empty());
    }

    #[test]
    fn a_positional_argument_may_not_take_a_named_ones_parameter() {
        // `f(a: 1, 2)`: the positional argument is the first parameter's, already given.
        let m = match_args(&["a", "b"], &[Some("a"), None]);
        assert_eq!(m.slots, [Some(0), None]);
        assert_eq!(
            m.issues,
            [Issue::Repeated {
                arg: 1,
                first: 0,
                param: 0
            }]
        );
    }

    #[test]
    fn surplus_unknown_and_repeated_arguments_are_each_reported() {
        let m = match_args(&["a"], &[None, None, Some("z"), Some("a")]);
        assert_eq!(m.slots, [Some(0)]);
        assert_eq!(
            m.issues,
            [
                Issue::Surplus { arg: 1 },
                Issue::Unknown { arg: 2 },
                Issue::Repeated {
                    arg: 3,
                    first: 0,
                    param: 0
                }
            ]
        );
    }
}
