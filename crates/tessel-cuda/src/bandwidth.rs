//! Measured device memory bandwidth: the roofline the benchmarks compare against.

use crate::{Buffer, Error, Gpu};

/// Timed rounds of [`measure_copy_bandwidth`]; the median over them is reported.
const ROUNDS: u32 = 9;
/// Copies per timed round.
const REPS: u32 = 4;

/// Device-to-device copy bandwidth, GB/s (10^9 bytes per second), counting bytes read plus
/// bytes written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// Median over the rounds, GB/s.
    pub median_gb_s: f64,
    /// Slowest round, GB/s.
    pub min_gb_s: f64,
    /// Fastest round, GB/s.
    pub max_gb_s: f64,
    /// Bytes moved by one copy (read + written), bytes.
    pub bytes_per_copy: u64,
}

/// Measures device memory bandwidth by copying a `bytes`-byte buffer to another with
/// `cuMemcpyDtoDAsync`: `2 * bytes` moved per copy, timed with CUDA events, median of several
/// rounds after a warm-up. Use a buffer far larger than L2 (e.g. 2 GiB on an H200 with 50 MB
/// of L2) so that the copy streams from HBM. Allocates `2 * bytes` of device memory.
///
/// # Errors
/// [`Error::InvalidArgument`] if `bytes` is 0; [`Error::Driver`] if allocation or a copy
/// fails.
pub fn measure_copy_bandwidth(gpu: &Gpu, bytes: usize) -> Result<Bandwidth, Error> {
    if bytes == 0 {
        return Err(Error::InvalidArgument(
            "bandwidth needs a non-empty buffer".to_owned(),
        ));
    }
    let src = Buffer::alloc(gpu, bytes)?;
    let mut dst = Buffer::alloc(gpu, bytes)?;
    let timing = gpu.time_events_with(ROUNDS, REPS, || dst.copy_from(&src))?;
    let moved = 2.0 * bytes as f64;
    let gb_s = |us: f64| moved / (us * 1e-6) / 1e9;
    Ok(Bandwidth {
        median_gb_s: gb_s(timing.median_us),
        min_gb_s: gb_s(timing.max_us),
        max_gb_s: gb_s(timing.min_us),
        bytes_per_copy: 2 * bytes as u64,
    })
}
