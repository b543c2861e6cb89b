//! `rlc` never loads libtorch, in any build: its compiler commands (`check`, `fmt`, `build`,
//! `lsp` …) start in milliseconds, and `run` / `kernel --inputs` become `rlc-run`, the binary
//! that links libtorch, found next to `rlc`. Checked on the binary itself (its ELF dynamic
//! section names no libtorch library) and on a live process (a running `rlc lsp` has none
//! mapped); with the `runtime` feature both checks are shown to see libtorch in `rlc-run`.

mod common;

#[cfg(feature = "runtime")]
use common::refused;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

const RLC: &str = env!("CARGO_BIN_EXE_rlc");

/// Whether a shared library's name is one of libtorch's (libtorch*.so, libc10*.so).
fn is_libtorch(name: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.starts_with("libtorch") || file.starts_with("libc10")
}

/// The DT_NEEDED entries of a 64-bit little-endian ELF file: the shared libraries the dynamic
/// loader maps before `main`.
fn needed(path: &str) -> Vec<String> {
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&elf[..4], b"\x7fELF", "{path} is not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "{path}: not 64-bit little-endian");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    // (type, file offset, virtual address, size in the file) of each program header.
    let headers: Vec<(u32, usize, usize, usize)> = (0..phnum)
        .map(|i| {
            let h = phoff + i * phentsize;
            (u32_at(h), u64_at(h + 8), u64_at(h + 16), u64_at(h + 32))
        })
        .collect();
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    let Some(&(_, dynamic, _, size)) = headers.iter().find(|h| h.0 == PT_DYNAMIC) else {
        return Vec::new(); // statically linked
    };
    let entries: Vec<(u64, usize)> = (dynamic..dynamic + size)
        .step_by(16)
        .map(|o| (u64_at(o) as u64, u64_at(o + 8)))
        .take_while(|&(tag, _)| tag != 0)
        .collect();
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    let strtab_addr = entries
        .iter()
        .find(|e| e.0 == DT_STRTAB)
        .expect("DT_STRTAB")
        .1;
    let &(_, offset, vaddr, _) = headers
        .iter()
        .find(|&&(ty, _, vaddr, filesz)| {
            ty == PT_LOAD && (vaddr..vaddr + filesz).contains(&strtab_addr)
        })
        .expect("the string table is in a loaded segment");
    let strtab = offset + (strtab_addr - vaddr);
    entries
        .iter()
        .filter(|e| e.0 == DT_NEEDED)
        .map(|&(_, at)| {
            let start = strtab + at;
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

/// The files mapped into a running `BINARY lsp` once it has answered `initialize` (so the
/// dynamic loader and every static initialiser have run).
fn mapped_by_live_server(binary: &str) -> Vec<String> {
    let mut child = Command::new(binary)
        .arg("lsp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#;
    let mut stdin = child.stdin.take().unwrap();
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    stdin.flush().unwrap();
    // The answer's headers and body, read on a thread so that a server that never answers fails
    // the test instead of hanging it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            match line.trim_end() {
                "" => break,
                l => {
                    if let Some(n) = l.strip_prefix("Content-Length: ") {
                        length = n.parse().unwrap();
                    }
                }
            }
        }
        let mut answer = vec![0; length];
        reader.read_exact(&mut answer).unwrap();
        let _ = tx.send(String::from_utf8_lossy(&answer).into_owned());
    });
    let answer = rx.recv_timeout(Duration::from_secs(120));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id()));
    child.kill().unwrap();
    child.wait().unwrap();
    let answer = answer.expect("`lsp` answers `initialize`");
    assert!(answer.contains("\"capabilities\""), "{answer}");
    let maps = maps.expect("the server's memory map");
    let mut files: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(str::to_string)
        .collect();
    files.dedup();
    files
}

#[test]
fn rlc_does_not_link_libtorch() {
    let libs = needed(RLC);
    assert!(
        libs.iter().any(|l| l.starts_with("libc.so")),
        "the ELF reader finds the C library: {libs:?}"
    );
    assert!(!libs.iter().any(|l| is_libtorch(l)), "{libs:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_running_rlc_has_no_libtorch_mapped() {
    let files = mapped_by_live_server(RLC);
    assert!(
        files.iter().any(|f| f.contains("libc.so")),
        "the memory map shows libraries: {files:?}"
    );
    let torch: Vec<&String> = files.iter().filter(|f| is_libtorch(f)).collect();
    assert!(torch.is_empty(), "{torch:?}");
}

/// `rlc-run` is the binary that links libtorch: the two checks above do see it there.
#[cfg(feature = "runtime")]
#[test]
fn rlc_run_links_libtorch_and_the_checks_see_it() {
    let runner = env!("CARGO_BIN_EXE_rlc-run");
    let libs = needed(runner);
    assert!(libs.iter().any(|l| is_libtorch(l)), "{libs:?}");
    #[cfg(target_os = "linux")]
    {
        let files = mapped_by_live_server(runner);
        assert!(files.iter().any(|f| is_libtorch(f)), "{files:?}");
    }
}

/// `rlc` alone (no `rlc-run` next to it) says where the runtime must be, for both commands that
/// need it, and exits 2; the compiler commands work.
#[cfg(feature = "runtime")]
#[test]
fn without_rlc_run_next_to_it_rlc_says_what_to_install() {
    let dir = common::scratch("alone");
    let alone = dir.join("rlc");
    std::fs::copy(RLC, &alone).unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::path::Path::new(root).join("examples/grpo_digits.rl");
    let example = example.to_str().unwrap();
    let inputs = dir.join("in.safetensors");
    for args in [
        vec!["run", example],
        vec![
            "kernel",
            example,
            "--fn",
            "exact",
            "--inputs",
            inputs.to_str().unwrap(),
        ],
    ] {
        let out = Command::new(&alone).args(&args).output().unwrap();
        let said = refused(&out, 2);
        assert!(
            said.contains("`rlc-run`, the runtime, which is not next to `rlc`")
                && said.contains(&dir.join("rlc-run").display().to_string())
                && said.contains("--features runtime"),
            "{args:?}: {said}"
        );
    }
    let out = Command::new(&alone)
        .args(["check", example])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A symbolic link to `rlc` (e.g. in ~/.local/bin) finds `rlc-run` next to the real file, and
/// what `rlc-run` says and its exit status reach the caller unchanged.
#[cfg(all(unix, feature = "runtime"))]
#[test]
fn through_a_link_rlc_hands_over_to_the_runtime_next_to_the_real_file() {
    let dir = common::scratch("link");
    let link = dir.join("rlc");
    std::os::unix::fs::symlink(RLC, &link).unwrap();
    // A file that does not exist: `rlc-run` reports it (`rlc` parsed the arguments only).
    let missing = dir.join("missing.rl");
    let out = Command::new(&link)
        .args(["run", missing.to_str().unwrap()])
        .output()
        .unwrap();
    let said = refused(&out, 2);
    assert!(!said.contains("not next to"), "{said}");
    assert!(said.contains("missing.rl"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
