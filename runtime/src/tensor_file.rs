//! Named tensors to one safetensors file in the layout `transformers` reads. Below both
//! `checkpoint` (a checkpoint's tensor files) and `hf` (a saved model's weights).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, View};
use tch::{Device, Tensor};

/// Why a safetensors file was not written.
#[derive(Debug, thiserror::Error)]
pub enum TensorFileError {
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot save: {message}")]
    Unsavable { path: PathBuf, message: String },
}

/// Writes named tensors to one safetensors file with the `{"format": "pt"}` metadata that
/// `transformers` checks for (a file without tensors has none). Names must be distinct.
pub fn write_safetensors<'t>(
    path: &Path,
    tensors: impl IntoIterator<Item = (&'t str, &'t Tensor)>,
) -> Result<(), TensorFileError> {
    let unsavable = |message: String| TensorFileError::Unsavable {
        path: path.to_path_buf(),
        message,
    };
    let mut views = Vec::new();
    let mut seen = HashSet::new();
    for (name, tensor) in tensors {
        if name == "__metadata__" || !seen.insert(name) {
            return Err(unsavable(format!(
                "tensor name `{name}` is reserved or repeated"
            )));
        }
        views.push((
            name,
            Bytes::of(tensor).map_err(|e| unsavable(format!("`{name}`: {e}")))?,
        ));
    }
    // safetensors 0.3 cannot read back a header that holds the metadata and no tensor.
    let metadata =
        (!views.is_empty()).then(|| HashMap::from([("format".to_string(), "pt".to_string())]));
    safetensors::tensor::serialize_to_file(views, &metadata, path).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(source) => TensorFileError::Write {
            path: path.to_path_buf(),
            source,
        },
        other => unsavable(other.to_string()),
    })
}

/// A tensor's bytes on the CPU, laid out contiguously, as safetensors stores them.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Bytes {
    fn of(tensor: &Tensor) -> Result<Bytes, tch::TchError> {
        let dtype = Dtype::try_from(tensor.kind())?;
        let cpu = tensor
            .f_detach()?
            .f_to_device(Device::Cpu)?
            .f_contiguous()?;
        let numel = cpu.numel();
        let mut data = vec![0u8; numel * cpu.kind().elt_size_in_bytes()];
        cpu.f_copy_data_u8(&mut data, numel)?;
        Ok(Bytes {
            dtype,
            shape: cpu.size().iter().map(|&d| d as usize).collect(),
            data,
        })
    }
}

impl View for Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}
