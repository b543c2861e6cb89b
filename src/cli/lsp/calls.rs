//! The call whose argument list holds the cursor, read from the text as the editor has it (it
//! is often mid-edit and does not parse): what signature help and argument completion start
//! from.

/// A call's argument list up to the cursor: `grpo(policy, data: rev|`.
#[derive(Debug, PartialEq)]
pub struct CallAt {
    /// The callee as written: `grpo`, or `recipes.grpo` (its dotted parts).
    pub callee: Vec<String>,
    /// The arguments before the one at the cursor: each one's name, `None` where positional.
    pub before: Vec<Option<String>>,
    /// The name of the argument at the cursor when it is written `name:` already.
    pub named: Option<String>,
    /// The text of the argument at the cursor, from its start to the cursor.
    pub current: String,
}

/// The innermost call whose parentheses hold `offset` of `text`, when its callee is a name or
/// a dotted name; `None` in a block (a closure's body), in brackets, or in the parameter list
/// of a `fn` or `pipeline` being declared.
pub fn call_at(text: &str, offset: usize) -> Option<CallAt> {
    let before = text.get(..offset.min(text.len()))?;
    let bytes = before.as_bytes();
    let mut depth = 0usize;
    let mut i = bytes.len();
    let open = loop {
        if i == 0 {
            return None;
        }
        i -= 1;
        match bytes[i] {
            b')' | b']' | b'}' => depth += 1,
            b'(' if depth == 0 => break i,
            b'[' | b'{' if depth == 0 => return None,
            b'(' | b'[' | b'{' => depth -= 1,
            b'"' => {
                // Skip back over a string literal.
                while i > 0 {
                    i -= 1;
                    if bytes[i] == b'"' && (i == 0 || bytes[i - 1] != b'\\') {
                        break;
                    }
                }
            }
            _ => {}
        }
    };
    let head = &before[..open];
    let callee_start = head
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .map_or(0, |at| at + 1);
    let callee = &head[callee_start..];
    if callee.is_empty()
        || callee.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        || callee.ends_with('.')
    {
        return None;
    }
    let declared = head[..callee_start].trim_end();
    if ["fn", "pipeline"].iter().any(|kw| {
        declared.ends_with(kw)
            && !declared[..declared.len() - kw.len()]
                .ends_with(|c: char| c.is_alphanumeric() || c == '_')
    }) {
        return None;
    }
    let args = split_arguments(&before[open + 1..]);
    let (current, done) = args.split_last()?;
    Some(CallAt {
        callee: callee.split('.').map(str::to_string).collect(),
        before: done.iter().map(|a| argument_name(a)).collect(),
        named: argument_name(current),
        current: current.to_string(),
    })
}

/// `text` split at its commas outside brackets and strings.
fn split_arguments(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// The name of a named argument (`data: reverse` → `data`).
fn argument_name(arg: &str) -> Option<String> {
    let arg = arg.trim_start();
    let end = arg
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(arg.len());
    let (name, rest) = arg.split_at(end);
    let rest = rest.trim_start();
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()) && rest.starts_with(':'))
        .then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Option<CallAt> {
        let offset = text.find('|').unwrap();
        call_at(&text.replace('|', ""), offset)
    }

    #[test]
    fn arguments_before_the_cursor_with_their_names() {
        let c = at("pipeline train { grpo(policy, ref, data: rev|").unwrap();
        assert_eq!(c.callee, ["grpo"]);
        assert_eq!(c.before, [None, None]);
        assert_eq!(c.named.as_deref(), Some("data"));
        assert_eq!(c.current, " data: rev");
        let c = at("x = lib.f(a: g(1, 2), \"s,)\", |)").unwrap();
        assert_eq!(c.callee, ["lib", "f"]);
        assert_eq!(c.before, [Some("a".to_string()), None]);
        assert_eq!(c.named, None);
        assert_eq!(c.current, " ");
    }

    #[test]
    fn no_call_in_a_block_brackets_or_a_declaration() {
        assert_eq!(at("policy.update(r) { logp -> f(|").unwrap().callee, ["f"]);
        assert!(at("policy.update(r) { logp -> |").is_none());
        assert!(at("x[1, |").is_none());
        assert!(at("pipeline grpo(policy: |").is_none());
        assert!(at("fn f(x: |").is_none());
        assert!(at("(1 + |").is_none());
        assert!(at("ffn(|").is_some());
    }
}
