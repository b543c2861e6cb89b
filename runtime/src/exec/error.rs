//! Why a run stopped.

use crate::collectives::CollectiveError;
use crate::generate::GenerateError;
use crate::kernels::fused::FusedError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan asks for something this runtime does not execute yet.
    #[error("this runtime cannot run the plan: {0}")]
    Unsupported(String),
    /// The plan contradicts itself or the program it was built from.
    #[error("the plan does not match its program: {0}")]
    Plan(String),
    #[error("dataset `{name}`: {message}")]
    Dataset { name: String, message: String },
    #[error("`{function}` failed at step {step}: {source}")]
    Kernel {
        function: String,
        step: u64,
        source: FusedError,
    },
    #[error("cannot load the weights of `{role}`: {message}")]
    Weights { role: String, message: String },
    #[error("generation failed: {0}")]
    Generate(#[from] GenerateError),
    #[error("a collective failed: {0}")]
    Collective(#[from] CollectiveError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("the loss is not finite at step {step} ({value})")]
    NonFinite { step: u64, value: f64 },
    /// A parallel layout could not run a call (shapes, missing heads, …).
    #[error("{0}")]
    Parallel(String),
    #[error("rank {rank} stopped unexpectedly: {message}")]
    RankFailed { rank: u32, message: String },
    /// The processes a launcher started cannot run the plan's ranks.
    #[error("{0}")]
    Launch(String),
    /// `--resume` cannot continue the run in the folder as asked.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// A verifier gave no score for a sample and its declaration says `on_error: fail`.
    #[error("verifier `{verifier}` failed on sample {sample} at step {step}: {cause}")]
    Verifier {
        verifier: String,
        step: u64,
        sample: u64,
        cause: String,
    },
    /// An environment gave no usable answer for an episode and its declaration says
    /// `on_error: fail`.
    #[error(
        "environment `{environment}` failed on sample {sample} at step {step}, turn {turn}: {cause}"
    )]
    Environment {
        environment: String,
        step: u64,
        sample: u64,
        turn: u64,
        cause: String,
    },
    /// A verifier's workers cannot start.
    #[error("{message}")]
    VerifierStart { message: String },
    /// An option of the run does not fit this machine.
    #[error("{0}")]
    Options(String),
}

impl From<crate::verify::SampleFailed> for RunError {
    fn from(e: crate::verify::SampleFailed) -> Self {
        let crate::verify::SampleFailed {
            verifier,
            step,
            sample,
            cause,
        } = e;
        RunError::Verifier {
            verifier,
            step,
            sample,
            cause,
        }
    }
}

impl From<crate::parallel::tp::TpError> for RunError {
    fn from(e: crate::parallel::tp::TpError) -> Self {
        use crate::parallel::tp::TpError;
        match e {
            // A collective that failed is the echo of another rank's failure.
            TpError::Collective(e) => RunError::Collective(e),
            other => RunError::Parallel(format!("tensor parallelism: {other}")),
        }
    }
}

impl From<crate::parallel::fsdp::FsdpError> for RunError {
    fn from(e: crate::parallel::fsdp::FsdpError) -> Self {
        use crate::parallel::fsdp::FsdpError;
        match e {
            FsdpError::Collective(e) => RunError::Collective(e),
            other => RunError::Parallel(format!("FSDP: {other}")),
        }
    }
}

impl From<crate::parallel::pp::PipelineError> for RunError {
    fn from(e: crate::parallel::pp::PipelineError) -> Self {
        use crate::parallel::pp::PipelineError;
        match e {
            PipelineError::Collective(e) => RunError::Collective(e),
            other => RunError::Parallel(format!("pipeline parallelism: {other}")),
        }
    }
}

pub type Result<T> = std::result::Result<T, RunError>;
