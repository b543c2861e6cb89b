//! `rlc kernel --inputs`: evaluate one `fn` of a program on named tensors from a safetensors
//! file, the way users test their own reward and loss code. Inputs are checked against the
//! signature first; a mismatch is a diagnostic on the parameter it concerns.

use crate::cli::kernel::KernelArgs;
use crate::cli::{build, output};
use std::process::ExitCode;

pub fn evaluate(args: &KernelArgs) -> Result<ExitCode, String> {
    use rlc_runtime::kernels::args::Arg;
    use rlc_runtime::kernels::eager::Eager;
    use rlc_runtime::tch::{Device, Kind, Tensor};
    use rlc_syntax::ast::ItemKind;

    let (checked, files) = match build::check_file(&args.path, &args.output)? {
        Ok(checked) => checked,
        Err(code) => return Ok(code),
    };
    let root = checked.modules.get(0);
    let def = root
        .items
        .get(&args.function)
        .and_then(|&i| match &root.item(i).kind {
            ItemKind::Fn(f) => Some(f),
            _ => None,
        })
        .ok_or_else(|| {
            let fns: Vec<&str> = root
                .ast
                .items
                .iter()
                .filter_map(|item| match &item.kind {
                    ItemKind::Fn(f) => Some(f.name.name.as_str()),
                    _ => None,
                })
                .collect();
            format!(
                "`{}` has no fn `{}` (its fns: {})",
                args.path.display(),
                args.function,
                if fns.is_empty() {
                    "none".into()
                } else {
                    fns.join(", ")
                }
            )
        })?;
    let path = args.inputs.as_ref().ok_or("--inputs is required")?;
    let inputs = Tensor::read_safetensors(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let shapes: Vec<signature::Input> = inputs
        .iter()
        .map(|(name, t)| signature::Input {
            name: name.clone(),
            shape: t.size(),
            elem: signature::Elem::of(t.kind()),
        })
        .collect();
    let mut problems = signature::check(def, root.file, &shapes, &path.display().to_string());
    if !problems.is_empty() {
        return Ok(output::emit(&mut problems, &files, &args.output));
    }
    // The `fn` lowered to the kernel IR, as a plan carries it, and run one operation per node
    // (in f64 when an input is).
    let given: Vec<&str> = inputs.iter().map(|(name, _)| name.as_str()).collect();
    let kernel = match rlc_kernel::lower::lower_fn(&checked.bodies, &args.function, &given) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: `{}` cannot run as a kernel: {e}", args.function);
            return Ok(ExitCode::from(1));
        }
    };
    let float = if inputs.iter().any(|(_, t)| t.kind() == Kind::Double) {
        Kind::Double
    } else {
        Kind::Float
    };
    let call: Vec<(&str, Arg)> = inputs
        .iter()
        .map(|(name, t)| (name.as_str(), Arg::from(t)))
        .collect();
    let result = match Eager::with_float(float).run_args(&kernel, &call, Device::Cpu) {
        Ok(mut out) => out.remove(0),
        Err(e) => {
            eprintln!("error: `{}` failed: {e}", args.function);
            return Ok(ExitCode::from(1));
        }
    };
    println!("{}", describe(&result));
    if let Some(out) = &args.out {
        Tensor::write_safetensors(&[("out", result.contiguous())], out)
            .map_err(|e| format!("cannot write `{}`: {e}", out.display()))?;
        eprintln!("wrote {} (tensor `out`)", out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `f32[4, 3] = [[…], …]`: the type, and the values when there are few.
fn describe(t: &rlc_runtime::tch::Tensor) -> String {
    use rlc_runtime::tch::Kind;
    let dims: Vec<String> = t.size().iter().map(i64::to_string).collect();
    let kind = format!("{:?}", t.kind()).to_lowercase();
    let head = format!("{kind}[{}]", dims.join(", "));
    if t.numel() > 64 {
        return format!("{head} ({} values; --out writes them)", t.numel());
    }
    let values: Vec<f64> = t
        .to_kind(Kind::Double)
        .flatten(0, -1)
        .try_into()
        .unwrap_or_default();
    let text: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
    format!("{head} = [{}]", text.join(", "))
}

/// Inputs against a `fn`'s signature: every parameter without a default is given, no input is
/// unknown, ranks and literal sizes match, a dimension name has one size, element types fit.
mod signature {
    use rlc_diagnostics::{Code, Diagnostic, FileId};
    use rlc_syntax::ast::{Dim, FnDef};
    use std::collections::BTreeMap;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Elem {
        Float,
        Int,
        Bool,
    }

    impl Elem {
        pub fn of(kind: rlc_runtime::tch::Kind) -> Elem {
            use rlc_runtime::tch::Kind::*;
            match kind {
                Bool => Elem::Bool,
                Half | Float | Double | BFloat16 => Elem::Float,
                _ => Elem::Int,
            }
        }

        fn of_type(name: &str) -> Option<Elem> {
            Some(match name {
                "f32" | "f16" | "bf16" | "f64" => Elem::Float,
                "i32" | "i64" | "Tokens" => Elem::Int,
                "bool" | "Mask" => Elem::Bool,
                _ => return None,
            })
        }

        fn word(self) -> &'static str {
            match self {
                Elem::Float => "floats",
                Elem::Int => "integers",
                Elem::Bool => "booleans",
            }
        }
    }

    pub struct Input {
        pub name: String,
        pub shape: Vec<i64>,
        pub elem: Elem,
    }

    pub fn check(def: &FnDef, file: FileId, inputs: &[Input], source: &str) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let fail = |code, message: String, span, label: &str| {
            Diagnostic::new(code, message, file, span).primary_label(label.to_string())
        };
        for input in inputs {
            if !def.params.iter().any(|p| p.name.name == input.name) {
                let names: Vec<&str> = def.params.iter().map(|p| p.name.name.as_str()).collect();
                out.push(
                    fail(
                        Code::UnknownArgument,
                        format!(
                            "{source} holds `{}`, which `{}` does not take",
                            input.name, def.name.name
                        ),
                        def.name.span,
                        "this fn",
                    )
                    .help(format!("its parameters: {}", names.join(", "))),
                );
            }
        }
        // Dimension name → (size, the parameter that fixed it).
        let mut sizes: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
        for param in &def.params {
            let name = param.name.name.as_str();
            let Some(input) = inputs.iter().find(|i| i.name == name) else {
                if param.default.is_none() {
                    out.push(fail(
                        Code::UnknownArgument,
                        format!("{source} has no tensor `{name}`"),
                        param.span,
                        "this parameter has no value",
                    ));
                }
                continue;
            };
            let Some(ty) = &param.ty else { continue };
            if let Some(elem) = Elem::of_type(&ty.name.name)
                && elem != input.elem
            {
                out.push(fail(
                    Code::TypeMismatch,
                    format!(
                        "`{name}` holds {}, the signature wants {}",
                        input.elem.word(),
                        elem.word()
                    ),
                    ty.span,
                    "declared here",
                ));
            }
            let dims = ty.dims.as_deref().unwrap_or(&[]);
            if dims.len() != input.shape.len() {
                out.push(fail(
                    Code::ShapeMismatch,
                    format!(
                        "`{name}` is a tensor of rank {} ({:?}), the signature's has rank {}",
                        input.shape.len(),
                        input.shape,
                        dims.len()
                    ),
                    ty.span,
                    "declared here",
                ));
                continue;
            }
            for (dim, &size) in dims.iter().zip(&input.shape) {
                match dim {
                    Dim::Size(want, span) if *want as i64 != size => out.push(fail(
                        Code::ShapeMismatch,
                        format!("`{name}` has size {size} where the signature fixes {want}"),
                        *span,
                        "fixed here",
                    )),
                    Dim::Named(id) => match sizes.get(id.name.as_str()) {
                        Some(&(first, by)) if first != size => out.push(
                            fail(
                                Code::ShapeMismatch,
                                format!(
                                    "`{}` is {first} in `{by}` but {size} in `{name}`",
                                    id.name
                                ),
                                id.span,
                                "one dimension, two sizes",
                            )
                            .help("every use of a dimension name must have the same size"),
                        ),
                        Some(_) => {}
                        None => {
                            sizes.insert(&id.name, (size, name));
                        }
                    },
                    _ => {}
                }
            }
        }
        out
    }
}
