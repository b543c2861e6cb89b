//! The scope of one `fn` evaluation: its module (for names), its local bindings (parameters,
//! `let`s, scan carries) and the sizes of its dimension names.

use super::error::{EvalError, Result};
use super::value::Value;
use std::collections::HashMap;

pub struct Frame {
    /// The module whose names the body sees.
    pub module: usize,
    /// The `fn` being evaluated, for error messages.
    pub function: String,
    scopes: Vec<HashMap<String, Value>>,
    /// Size of every dimension name bound by the parameters (`B` → 6).
    pub sizes: HashMap<String, i64>,
}

impl Frame {
    pub fn new(module: usize, function: &str) -> Self {
        Frame {
            module,
            function: function.to_string(),
            scopes: vec![HashMap::new()],
            sizes: HashMap::new(),
        }
    }

    pub fn push(&mut self) {
        self.scopes.push(HashMap::new());
    }

    pub fn pop(&mut self) -> HashMap<String, Value> {
        self.scopes.pop().unwrap_or_default()
    }

    pub fn bind(&mut self, name: &str, value: Value) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name.to_string(), value);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// `name = value`: updates the innermost binding of `name`.
    pub fn assign(&mut self, name: &str, value: Value) -> Result<()> {
        match self.scopes.iter_mut().rev().find_map(|s| s.get_mut(name)) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(EvalError::UnknownName {
                function: self.function.clone(),
                name: name.to_string(),
            }),
        }
    }

    /// Records the size of dimension `name`; a second, different size is a shape error.
    pub fn bind_size(&mut self, name: &str, size: i64, what: &str) -> Result<()> {
        match self.sizes.get(name) {
            Some(&s) if s != size => Err(EvalError::ShapeMismatch {
                function: self.function.clone(),
                detail: format!("`{name}` is {s} elsewhere but {size} in {what}"),
            }),
            _ => {
                self.sizes.insert(name.to_string(), size);
                Ok(())
            }
        }
    }
}
