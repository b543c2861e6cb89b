//! `rlc kernel`: evaluate one `fn` of a program on named tensors from a safetensors file, the
//! way users test their own reward and loss code (on libtorch: `rlc-run` does it,
//! src/bin/rlc-run/kernel.rs), or print the fused kernel it compiles to (`--emit`, here).

use super::OutputArgs;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Clone, clap::Args)]
pub struct KernelArgs {
    /// The program that defines the function.
    #[arg(value_name = "FILE")]
    pub path: PathBuf,
    /// The `fn` to evaluate (a name of the root module).
    #[arg(long = "fn", value_name = "NAME")]
    pub function: String,
    /// The arguments, one tensor per parameter, named as the parameters.
    #[arg(long, value_name = "IN.safetensors", required_unless_present = "emit")]
    pub inputs: Option<PathBuf>,
    /// Print the fused kernel instead of evaluating: its IR and passes, or its CUDA C.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub emit: Option<Emit>,
    /// With `--emit`: append the derivative of the (scalar) result with respect to these
    /// parameters.
    #[arg(long, value_name = "PARAM", value_delimiter = ',', requires = "emit")]
    pub grad: Vec<String>,
    /// Write the result here as the tensor `out`.
    #[arg(long, value_name = "OUT.safetensors")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The kernel IR and how it is cut into passes.
    Ir,
    /// The CUDA C that NVRTC compiles.
    Cuda,
}

/// `--emit`: the fused kernel of the `fn` with every parameter as an input. (Evaluating the `fn`
/// on `--inputs` needs libtorch: `rlc-run` does it, src/bin/rlc-run/kernel.rs.)
pub fn emit_kernel(args: &KernelArgs, emit: Emit) -> Result<ExitCode, String> {
    use rlc_syntax::ast::ItemKind;
    let (checked, _files) = match super::build::check_file(&args.path, &args.output)? {
        Ok(checked) => checked,
        Err(code) => return Ok(code),
    };
    let root = checked.modules.get(0);
    let Some(ItemKind::Fn(def)) = root.items.get(&args.function).map(|&i| &root.item(i).kind)
    else {
        return Err(format!(
            "`{}` has no fn `{}`",
            args.path.display(),
            args.function
        ));
    };
    let given: Vec<&str> = def.params.iter().map(|p| p.name.name.as_str()).collect();
    let fail = |e: rlc_kernel::KernelError| format!("`{}`: {e}", args.function);
    let mut kernel =
        rlc_kernel::lower::lower_fn(&checked.bodies, &args.function, &given).map_err(fail)?;
    if !args.grad.is_empty() {
        let wrt: Vec<&str> = args.grad.iter().map(String::as_str).collect();
        kernel = rlc_kernel::grad::differentiate(&kernel, "result", &wrt).map_err(fail)?;
    }
    let schedule = rlc_kernel::schedule::schedule(&kernel).map_err(fail)?;
    match emit {
        Emit::Ir => {
            print!("{kernel}");
            for (p, pass) in schedule.passes.iter().enumerate() {
                let loops: Vec<String> = pass
                    .loops
                    .iter()
                    .map(|l| match l.kind {
                        rlc_kernel::schedule::LoopKind::Map => format!(
                            "map (reduces {:?}, stores {:?})",
                            l.reductions,
                            l.stores.iter().map(|s| s.node).collect::<Vec<_>>()
                        ),
                        rlc_kernel::schedule::LoopKind::Scan(n) => format!("scan %{n}"),
                    })
                    .collect();
                println!(
                    "pass {p}: rows [{}]; then the host finishes {:?}",
                    loops.join("; "),
                    pass.host
                );
            }
        }
        Emit::Cuda => print!("{}", rlc_kernel::cuda::emit(&kernel, &schedule)),
    }
    Ok(ExitCode::SUCCESS)
}
