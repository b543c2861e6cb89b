//! `rlc explain`: the page of a diagnostic code.

use rlc_diagnostics::{CODES, Code};
use rlc_plan::PlanCode;
use std::process::ExitCode;

pub fn run(code: Option<&str>, list: bool) -> Result<ExitCode, String> {
    if list {
        for info in CODES {
            println!("{}  {:<7}  {}", info.id, info.severity.as_str(), info.title);
        }
        for plan in PlanCode::ALL {
            println!("{}  {:<7}  {}", plan.as_str(), "error", plan.title());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let id = code.unwrap_or_default();
    // Errors in plan files (not in `.rl` source) have codes of their own.
    if let Some(plan) = PlanCode::parse(id) {
        println!(
            "# {}: {}\n\n{}",
            plan.as_str(),
            plan.title(),
            plan.explanation()
        );
        return Ok(ExitCode::SUCCESS);
    }
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
