//! `rlc explain`: the page of a diagnostic code.

use rlc_diagnostics::{CODES, Code};
use std::process::ExitCode;

pub fn run(code: Option<&str>, list: bool) -> Result<ExitCode, String> {
    if list {
        for info in CODES {
            println!("{}  {:<7}  {}", info.id, info.severity.as_str(), info.title);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let id = code.unwrap_or_default();
    match Code::parse(id) {
        Some(code) => {
            print!("{}", code.info().explain);
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let ids = CODES.iter().map(|c| c.id);
            let hint = match rlc_syntax::closest(&id.to_ascii_uppercase(), ids, 1) {
                Some(near) => format!(" (did you mean {near}?)"),
                None => String::new(),
            };
            Err(format!(
                "no diagnostic has the code `{id}`{hint}; `rlc explain --list` lists them"
            ))
        }
    }
}
