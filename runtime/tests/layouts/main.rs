//! Every parallel layout computes what one rank holding the whole model computes: logits within
//! 1e-5, weights after three training steps within 1e-4, the same generated tokens.
//!
//! Ranks are threads of this process with the in-process collectives, or, when `mpirun` starts
//! this test binary, the job's processes with the MPI collectives (feature `mpi`): each process
//! runs its own rank of every layout and gets every rank's result back (`ranks.rs`), so the same
//! assertions run either way. A layout with more ranks than the job's processes is skipped, and
//! the skip reported on stderr. `under_mpirun.rs` runs this suite as 2 and as 4 processes on
//! loopback and checks that every result is bit-identical to the threads' one.

mod combined;
mod fixture;
mod fsdp;
mod pp;
mod precision;
mod ranks;
mod reshard;
mod tp;
#[cfg(feature = "mpi")]
mod under_mpirun;

#[test]
fn the_reference_is_deterministic_and_padding_free_rows_train() {
    let config = fixture::config();
    let a = fixture::reference_logits(&config);
    let b = fixture::reference_logits(&config);
    assert_eq!(fixture::max_diff(&a, &b), 0.0);
    let trained = fixture::reference_training(&config);
    let (vs, _) = fixture::model(&config);
    let initial = fixture::named_weights(&vs);
    let moved = trained
        .iter()
        .filter(|(name, w)| fixture::max_diff(w, &initial[*name]) > 1e-4)
        .count();
    assert!(
        moved > trained.len() / 2,
        "training moved only {moved} tensors"
    );
    let tokens = fixture::reference_generation(&config);
    assert_eq!(tokens.size(), [8, 10]);
    assert_eq!(
        fixture::batch_tokens(),
        8.0 * 11.0 - 2.0 * (1.0 + 2.0 + 3.0)
    );
}
