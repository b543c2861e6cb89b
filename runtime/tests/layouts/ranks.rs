//! Ranks as threads of this process (the default) or as the processes of an MPI job (this test
//! binary started by `mpirun`; see `under_mpirun.rs`), behind one [`run_on`].
//!
//! With processes, each process runs only its own rank's body; the results of every rank come
//! back to every process ([`RankResult`] encodes them into one byte tensor, all-gathered over the
//! job), so the tests' assertions read the same `Vec` of results either way. A layout needs at
//! least as many processes as it has ranks: tests ask [`fits`] first, which under a smaller job
//! reports the skip on stderr (`layouts: SKIPPED …`, counted by the driver) and says no.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;

use rlc_plan::model::Layout;
use rlc_runtime::collectives::{
    CollectiveError, Communicator, Group, ProcessWorld, init_processes, split, wire,
};
use rlc_runtime::parallel::combined::CombinedError;
use rlc_runtime::parallel::fsdp::{FsdpError, MemoryReport};
use rlc_runtime::parallel::pp::PipelineError;
use rlc_runtime::parallel::reshard::{ReshardError, ReshardStats};
use rlc_runtime::parallel::tp::TpError;
use rlc_runtime::parallel::{RankGroups, process_groups};
use tch::{Device, Tensor};

/// Set (to anything) to print a digest of every rank's result of every run (`layouts: DIGEST`
/// lines on stderr): the driver compares those of threads and of processes bit for bit.
pub const DIGEST_VARIABLE: &str = "RLC_LAYOUTS_DIGEST";

/// The job's processes when an MPI launcher started this test binary (MPI initialised on the
/// first call), `None` when ranks are threads.
pub fn processes() -> Option<ProcessWorld> {
    init_processes().expect("connecting the job's processes (MPI)")
}

/// `dp1·fsdp2·tp1·pp1`.
pub fn layout_name(layout: Layout) -> String {
    format!(
        "dp{}·fsdp{}·tp{}·pp{}",
        layout.dp, layout.fsdp, layout.tp, layout.pp
    )
}

/// Whether `layout` can run here: always with threads; with processes, when the job has a
/// process for each of its ranks (otherwise the skip is reported).
pub fn fits(layout: Layout) -> bool {
    fits_ranks(layout.devices() as usize, &layout_name(layout))
}

/// As [`fits`] for `ranks` ranks doing `what`.
pub fn fits_ranks(ranks: usize, what: &str) -> bool {
    match processes() {
        Some(world) if ranks > world.size => {
            skipped(
                &world,
                &format!(
                    "{what} needs {ranks} ranks, the job has {} processes",
                    world.size
                ),
            );
            false
        }
        _ => true,
    }
}

/// Whether ranks are threads; with processes, reports that `what` is skipped.
pub fn threads_only(what: &str) -> bool {
    match processes() {
        Some(world) => {
            skipped(&world, &format!("{what} (ranks as threads only)"));
            false
        }
        None => true,
    }
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    thread::current().name().unwrap_or("?").to_owned()
}

/// One line on stderr as it happens (libtest captures only `print!`-style output).
fn report(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn skipped(world: &ProcessWorld, why: &str) {
    if world.rank == 0 {
        report(&format!("layouts: SKIPPED {}: {why}", test_name()));
    }
}

/// Every rank's groups of `layout`, for reading coordinates (`rank`, `dp_rank`, `data_rank()`,
/// …): [`process_groups`] with threads; with processes (where only this process's communicators
/// exist) groups whose communicators have the right rank and size but are connected to no one
/// (any collective on them fails with `PeerLost`).
pub fn all_groups(layout: Layout) -> Vec<RankGroups> {
    if processes().is_none() {
        return process_groups(layout);
    }
    RankGroups::assemble(layout, |_, _, index, size| {
        let group = Group::new(size as usize).into_iter().nth(index as usize);
        Some(group.expect("a rank of the group"))
    })
}

/// A communicator over job ranks `0..ranks` for each of them that runs here (see [`split`]).
pub fn world_communicators(ranks: u32) -> Vec<Communicator> {
    split(&[(0..ranks).collect()])
        .expect("a communicator of the job's ranks")
        .into_iter()
        .map(|(_, comm)| comm)
        .collect()
}

/// What a process contributes to the gather of results.
const IDLE: u8 = 0;
const DONE: u8 = 1;
const PANICKED: u8 = 2;

/// Runs `body` on every rank `0..ranks` (`key` names the run in reports) and returns the results
/// in rank order. `here` makes what each rank that runs here gets: with threads, one per rank
/// (each body runs on a thread of its own); with processes, this process's one (none when its
/// rank is `ranks` or more; it still takes part in the gather). `here` runs on every process,
/// so it may split communicators.
///
/// # Panics
/// When a rank panics (with processes, every process panics naming it), or when processes are
/// fewer than `ranks` (ask [`fits_ranks`] first).
pub fn run_on<G: Send, T: RankResult + Send>(
    ranks: usize,
    key: &str,
    here: impl FnOnce() -> Vec<G>,
    body: impl Fn(G) -> T + Sync,
) -> Vec<T> {
    let results = match processes() {
        None => {
            let body = &body;
            thread::scope(|scope| {
                let handles: Vec<_> = here()
                    .into_iter()
                    .map(|g| scope.spawn(move || body(g)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a rank panicked"))
                    .collect()
            })
        }
        Some(world) => gather_from_processes(world, ranks, key, here, body),
    };
    assert_eq!(results.len(), ranks, "{key}: results of every rank");
    if std::env::var_os(DIGEST_VARIABLE).is_some() && processes().is_none_or(|w| w.rank == 0) {
        print_digests(key, &results);
    }
    results
}

fn gather_from_processes<G, T: RankResult>(
    world: ProcessWorld,
    ranks: usize,
    key: &str,
    here: impl FnOnce() -> Vec<G>,
    body: impl Fn(G) -> T,
) -> Vec<T> {
    assert!(
        ranks <= world.size,
        "{key}: {ranks} ranks cannot run on {} processes (ask `fixture::fits` first)",
        world.size
    );
    let mine = here();
    let job = world_communicators(world.size as u32)
        .pop()
        .expect("this process's communicator of the job");
    assert_eq!(
        mine.len(),
        usize::from(world.rank < ranks),
        "{key}: what process {} runs",
        world.rank
    );
    let mut out = Encoder::default();
    match mine.into_iter().next() {
        None => out.u8(IDLE),
        Some(g) => {
            let run = catch_unwind(AssertUnwindSafe(|| {
                let mut encoded = Encoder::default();
                body(g).encode(&mut encoded);
                encoded
            }));
            match run {
                Ok(encoded) => {
                    out.u8(DONE);
                    out.bytes.extend(encoded.bytes);
                }
                Err(payload) => {
                    let message = panic_message(payload.as_ref());
                    // Now, uncaptured: if the other ranks wait for this one, the job hangs.
                    report(&format!(
                        "layouts: rank {} of {key} panicked in {}: {message}",
                        world.rank,
                        test_name()
                    ));
                    out.u8(PANICKED);
                    message.encode(&mut out);
                }
            }
        }
    }
    let gathered = job
        .all_gather(&Tensor::from_slice(&out.bytes))
        .expect("gathering every rank's result");
    let mut results = Vec::with_capacity(ranks);
    let mut panics = Vec::new();
    for (rank, bytes) in gathered.iter().enumerate().take(ranks) {
        let bytes = Vec::<u8>::try_from(bytes).expect("a byte tensor");
        let mut input = Decoder::new(&bytes);
        match input.u8() {
            DONE => {
                results.push(T::decode(&mut input));
                input.finish();
            }
            PANICKED => panics.push(format!("rank {rank}: {}", String::decode(&mut input))),
            other => panic!("{key}: rank {rank} sent status {other}"),
        }
    }
    assert!(panics.is_empty(), "{key}: {}", panics.join("; "));
    results
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

thread_local! {
    /// Runs of each key so far in this test (each test runs on a thread of its own).
    static RUNS: RefCell<HashMap<String, usize>> = RefCell::new(HashMap::new());
}

/// `layouts: DIGEST <test> <key>#<n> rank <r> <fnv-1a of the encoded result>`.
fn print_digests<T: RankResult>(key: &str, results: &[T]) {
    let n = RUNS.with(|runs| {
        let mut runs = runs.borrow_mut();
        let n = runs.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n
    });
    let test = test_name();
    for (rank, result) in results.iter().enumerate() {
        let mut encoded = Encoder::default();
        result.encode(&mut encoded);
        let hash = encoded
            .bytes
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        report(&format!(
            "layouts: DIGEST {test} {key}#{n} rank {rank} {hash:016x}"
        ));
    }
}

/// A result of one rank as bytes, and back.
pub trait RankResult: Sized {
    fn encode(&self, out: &mut Encoder);
    fn decode(input: &mut Decoder) -> Self;
}

#[derive(Default)]
pub struct Encoder {
    bytes: Vec<u8>,
}

impl Encoder {
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub fn u64(&mut self, value: u64) {
        self.bytes.extend(value.to_le_bytes());
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.bytes.extend_from_slice(bytes);
    }
}

pub struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Decoder { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let slice = self
            .bytes
            .get(self.at..self.at + n)
            .expect("a truncated rank result");
        self.at += n;
        slice
    }

    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }

    pub fn raw(&mut self) -> &'a [u8] {
        let n = self.u64() as usize;
        self.take(n)
    }

    fn finish(&self) {
        assert_eq!(self.at, self.bytes.len(), "bytes left after a rank result");
    }
}

impl RankResult for () {
    fn encode(&self, _: &mut Encoder) {}
    fn decode(_: &mut Decoder) -> Self {}
}

impl RankResult for bool {
    fn encode(&self, out: &mut Encoder) {
        out.u8(u8::from(*self));
    }
    fn decode(input: &mut Decoder) -> Self {
        input.u8() != 0
    }
}

/// Integers through 64 bits, floats by their bits.
macro_rules! numbers {
    ($($ty:ty: $to:expr, $from:expr;)*) => {$(
        impl RankResult for $ty {
            fn encode(&self, out: &mut Encoder) {
                out.u64($to(*self));
            }
            fn decode(input: &mut Decoder) -> Self {
                $from(input.u64())
            }
        }
    )*};
}

numbers! {
    u32: u64::from, |v| u32::try_from(v).expect("a u32");
    u64: |v| v, |v| v;
    usize: |v| v as u64, |v| v as usize;
    i64: |v: i64| v as u64, |v| v as i64;
    f64: f64::to_bits, f64::from_bits;
}

impl RankResult for String {
    fn encode(&self, out: &mut Encoder) {
        out.raw(self.as_bytes());
    }
    fn decode(input: &mut Decoder) -> Self {
        String::from_utf8(input.raw().to_vec()).expect("UTF-8")
    }
}

/// Static names in errors (`TpError::NotDivisible::what`): leaked when decoded.
impl RankResult for &'static str {
    fn encode(&self, out: &mut Encoder) {
        out.raw(self.as_bytes());
    }
    fn decode(input: &mut Decoder) -> Self {
        String::decode(input).leak()
    }
}

impl<T: RankResult> RankResult for Option<T> {
    fn encode(&self, out: &mut Encoder) {
        out.u8(u8::from(self.is_some()));
        if let Some(value) = self {
            value.encode(out);
        }
    }
    fn decode(input: &mut Decoder) -> Self {
        (input.u8() != 0).then(|| T::decode(input))
    }
}

impl<T: RankResult, E: RankResult> RankResult for Result<T, E> {
    fn encode(&self, out: &mut Encoder) {
        match self {
            Ok(value) => {
                out.u8(0);
                value.encode(out);
            }
            Err(error) => {
                out.u8(1);
                error.encode(out);
            }
        }
    }
    fn decode(input: &mut Decoder) -> Self {
        match input.u8() {
            0 => Ok(T::decode(input)),
            _ => Err(E::decode(input)),
        }
    }
}

impl<T: RankResult> RankResult for Vec<T> {
    fn encode(&self, out: &mut Encoder) {
        out.u64(self.len() as u64);
        for item in self {
            item.encode(out);
        }
    }
    fn decode(input: &mut Decoder) -> Self {
        let n = input.u64() as usize;
        (0..n).map(|_| T::decode(input)).collect()
    }
}

impl<K: RankResult + Ord, V: RankResult> RankResult for BTreeMap<K, V> {
    fn encode(&self, out: &mut Encoder) {
        out.u64(self.len() as u64);
        for (key, value) in self {
            key.encode(out);
            value.encode(out);
        }
    }
    fn decode(input: &mut Decoder) -> Self {
        let n = input.u64() as usize;
        (0..n)
            .map(|_| (K::decode(input), V::decode(input)))
            .collect()
    }
}

macro_rules! tuples {
    ($(($($name:ident),+))*) => {$(
        impl<$($name: RankResult),+> RankResult for ($($name,)+) {
            #[allow(non_snake_case)]
            fn encode(&self, out: &mut Encoder) {
                let ($($name,)+) = self;
                $($name.encode(out);)+
            }
            fn decode(input: &mut Decoder) -> Self {
                ($($name::decode(input),)+)
            }
        }
    )*};
}

tuples! {
    (A)
    (A, B)
    (A, B, C)
    (A, B, C, D)
}

/// Kind, shape and the elements' bytes (so bit for bit); an undefined tensor stays undefined.
/// Decoded tensors are CPU tensors without autograd history.
impl RankResult for Tensor {
    fn encode(&self, out: &mut Encoder) {
        if !self.defined() {
            out.u8(0);
            return;
        }
        out.u8(1);
        let kind = self.kind();
        let code =
            wire::kind_code(kind).unwrap_or_else(|| panic!("a result tensor of kind {kind:?}"));
        out.u8(code as u8);
        self.size().encode(out);
        let host = self.detach().to_device(Device::Cpu).contiguous();
        let numel = host.numel();
        let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
        if numel > 0 {
            host.copy_data_u8(&mut bytes, numel);
        }
        out.raw(&bytes);
    }
    fn decode(input: &mut Decoder) -> Self {
        if input.u8() == 0 {
            return Tensor::new();
        }
        let kind = wire::kind_of(input.u8() as usize).expect("a kind's wire code");
        let size = Vec::<i64>::decode(input);
        Tensor::from_data_size(input.raw(), &size, kind)
    }
}

/// [`RankResult`] for a struct by its fields (all of them, each a `RankResult`).
macro_rules! rank_result_struct {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        impl $crate::ranks::RankResult for $ty {
            fn encode(&self, out: &mut $crate::ranks::Encoder) {
                $($crate::ranks::RankResult::encode(&self.$field, out);)*
            }
            fn decode(input: &mut $crate::ranks::Decoder) -> Self {
                Self {
                    $($field: $crate::ranks::RankResult::decode(input),)*
                }
            }
        }
    };
}
pub(crate) use rank_result_struct;

/// [`RankResult`] for an enum by its variants (tuple variants name their fields): the variant's
/// name, then its fields. A variant left out cannot cross between processes (encoding it panics,
/// naming it).
macro_rules! rank_result_enum {
    ($ty:ident {
        $($variant:ident $(( $($t:ident),* ))? $({ $($f:ident),* })?),* $(,)?
    }) => {
        impl $crate::ranks::RankResult for $ty {
            fn encode(&self, out: &mut $crate::ranks::Encoder) {
                match self {
                    $($ty::$variant $(( $($t),* ))? $({ $($f),* })? => {
                        $crate::ranks::RankResult::encode(&stringify!($variant), out);
                        $($($crate::ranks::RankResult::encode($t, out);)*)?
                        $($($crate::ranks::RankResult::encode($f, out);)*)?
                    })*
                    #[allow(unreachable_patterns)]
                    other => panic!(
                        "{other:?} cannot cross between processes: add its variant to \
                         `rank_result_enum!`"
                    ),
                }
            }
            fn decode(input: &mut $crate::ranks::Decoder) -> Self {
                let variant = <String as $crate::ranks::RankResult>::decode(input);
                $(if variant == stringify!($variant) {
                    return $ty::$variant
                        $(( $({
                            let $t = $crate::ranks::RankResult::decode(input);
                            $t
                        }),* ))?
                        $({ $($f: $crate::ranks::RankResult::decode(input)),* })?;
                })*
                panic!("a {} of variant `{variant}`", stringify!($ty))
            }
        }
    };
}

rank_result_struct!(MemoryReport {
    parameter_shards,
    gradient_shards,
    optimizer_state,
    peak_unsharded,
    peak_activations,
    peak,
});

rank_result_struct!(ReshardStats { received, local });

rank_result_enum!(CollectiveError {
    PeerLost,
    Unsupported(what),
    Transport(message),
    ShapeMismatch {
        rank,
        expected,
        found
    },
    InvalidPeer {
        peer,
        rank,
        world_size
    },
    InvalidRoot { root, world_size },
    MissingRootInput {
        root,
        expected,
        found
    },
    NotDivisible { size, world_size },
});

// `Config(ConfigError)` variants are left out: no test expects one.
rank_result_enum!(FsdpError {
    Layout { tp, pp },
    MissingWeight(name),
    UnexpectedWeight(name),
    WeightShape {
        name,
        expected,
        found
    },
    BatchShape { ids, mask },
    NoGradient,
    PassInFlight,
    Collective(error),
    Torch(message),
});

rank_result_enum!(TpError {
    NotDivisible { what, count, tp },
    MissingWeight(name),
    WeightShape {
        name,
        expected,
        found
    },
    UnevenShard { name, dim, tp },
    AlreadyRegistered(name),
    NoHead(what),
    InputShape { ids, mask, cached },
    CacheLayers { expected, found },
    TokenOutOfRange { id, vocab },
    Collective(error),
});

rank_result_enum!(PipelineError {
    TooManyStages { stages, layers },
    MissingWeight(name),
    WeightShape {
        name,
        expected,
        found
    },
    StageParts {
        stage,
        stages,
        problem
    },
    InputShape { ids, mask, cached },
    TokenOutOfRange { id, vocab },
    CacheLayers { expected, found },
    MicroBatches { micro, rows },
    LossShape(shape),
    Torch(message),
    Collective(error),
});

rank_result_enum!(CombinedError {
    Tp(error),
    Pipeline(error),
    UnevenBatch { rows, data_ranks },
    FsdpWithStages(pp),
    Collective(error),
});

rank_result_enum!(ReshardError {
    Uncovered {
        name,
        rank,
        missing
    },
    LocalSize {
        name,
        rank,
        expected,
        found
    },
    MissingShard { name, rank },
    NotInLayout { rank },
    Collective(error),
});
