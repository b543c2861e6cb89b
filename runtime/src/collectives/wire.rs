//! Tensors as 8-byte words for messages between processes: a count, then per tensor its kind,
//! rank, dimensions and byte length, then its bytes (row-major, padded to a whole word).

use tch::{Device, Kind, Tensor};

use super::CollectiveError;

/// The kinds a message carries, by their code on the wire (also the code of NCCL's descriptors
/// and of the layout tests' results).
const KINDS: [Kind; 10] = [
    Kind::Uint8,
    Kind::Int8,
    Kind::Int16,
    Kind::Int,
    Kind::Int64,
    Kind::Half,
    Kind::Float,
    Kind::Double,
    Kind::Bool,
    Kind::BFloat16,
];

/// The code of `kind` on the wire; `None` for kinds messages do not carry (complex, quantised).
pub fn kind_code(kind: Kind) -> Option<usize> {
    KINDS.iter().position(|k| *k == kind)
}

/// The kind of wire code `code`.
pub fn kind_of(code: usize) -> Option<Kind> {
    KINDS.get(code).copied()
}

/// Appends the encoding of `tensors` to `words` (tensors on any device; read on the CPU).
pub fn encode(tensors: &[Tensor], words: &mut Vec<u64>) -> Result<(), CollectiveError> {
    words.push(tensors.len() as u64);
    for tensor in tensors {
        let kind = tensor.kind();
        let code = kind_code(kind)
            .ok_or_else(|| CollectiveError::Unsupported(format!("tensors of kind {kind:?}")))?;
        let host = tensor.detach().to_device(Device::Cpu).contiguous();
        let size = host.size();
        let bytes = host.numel() * kind.elt_size_in_bytes();
        words.push(code as u64);
        words.push(size.len() as u64);
        words.extend(size.iter().map(|&d| d as u64));
        words.push(bytes as u64);
        let start = words.len();
        words.resize(start + bytes.div_ceil(8), 0);
        if bytes > 0 {
            // SAFETY: `host` is contiguous with `bytes` bytes at its data pointer, and the
            // destination words were just allocated with room for them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    host.data_ptr() as *const u8,
                    words[start..].as_mut_ptr() as *mut u8,
                    bytes,
                );
            }
        }
    }
    Ok(())
}

/// The tensors of one encoding, on the CPU.
pub fn decode(words: &[u64]) -> Result<Vec<Tensor>, CollectiveError> {
    let mut at = 0usize;
    let mut next = |n: usize| -> Result<&[u64], CollectiveError> {
        let slice = words.get(at..at + n).ok_or_else(|| {
            CollectiveError::Transport("a truncated message between ranks".into())
        })?;
        at += n;
        Ok(slice)
    };
    let count = next(1)?[0] as usize;
    let mut tensors = Vec::with_capacity(count);
    for _ in 0..count {
        let code = next(1)?[0] as usize;
        let kind = kind_of(code).ok_or_else(|| {
            CollectiveError::Transport(format!("a message with tensor kind code {code}"))
        })?;
        let ndim = next(1)?[0] as usize;
        let size: Vec<i64> = next(ndim)?.iter().map(|&d| d as i64).collect();
        let bytes = next(1)?[0] as usize;
        let data = next(bytes.div_ceil(8))?;
        // SAFETY: `data` holds at least `bytes` bytes (whole words, rounded up).
        let raw = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, bytes) };
        tensors.push(Tensor::from_data_size(raw, &size, kind));
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_shape_round_trips_bit_exactly() {
        let tensors = vec![
            Tensor::from_slice(&[1.5f32, -0.0, f32::NAN, 3.0]).view([2, 2]),
            Tensor::from_slice(&[7i64, -9]),
            Tensor::from_slice(&[1u8, 2, 3]),
            Tensor::from_slice(&[true, false, true]),
            Tensor::from_slice(&[0.1f64]).view([1, 1, 1]),
            Tensor::from_slice(&[2.5f32, 1.0, -4.0]).to_kind(Kind::BFloat16),
            Tensor::zeros([0, 3], (Kind::Float, Device::Cpu)),
            Tensor::from(3.25f64),
            // A non-contiguous view is sent as its values.
            Tensor::arange(6, (Kind::Int, Device::Cpu))
                .view([2, 3])
                .tr(),
        ];
        let mut words = Vec::new();
        encode(&tensors, &mut words).unwrap();
        let back = decode(&words).unwrap();
        assert_eq!(back.len(), tensors.len());
        for (a, b) in tensors.iter().zip(&back) {
            assert_eq!((a.kind(), a.size()), (b.kind(), b.size()));
            // Bitwise: NaN and -0.0 survive.
            let bits = |t: &Tensor| {
                Vec::<u8>::try_from(t.contiguous().reshape([-1]).view_dtype(Kind::Uint8)).unwrap()
            };
            assert_eq!(bits(a), bits(b));
        }
        assert!(decode(&words[..words.len() - 1]).is_err(), "truncated");
        assert!(decode(&[]).is_err());
    }
}
