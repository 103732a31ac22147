//! NCCL communicators over [`Gpu`]s (cudarc's `nccl` bindings), for tensor-parallel ranks.
//!
//! One process, one thread per GPU: the launching thread makes a [`UniqueId`], every rank's
//! thread opens its own [`Gpu`] and calls [`Communicator::join`] with it (NCCL's
//! `ncclCommInitRank` blocks until all ranks have joined). Collectives run on the rank's
//! [`Gpu`] stream, so they are ordered with its kernels and copies.
//!
//! The library is loaded at run time: `libnccl.so` must be on the loader's path. The pip
//! wheel `nvidia-nccl-cu13` ships only `libnccl.so.2`; a link named `libnccl.so` to it in a
//! directory on `LD_LIBRARY_PATH` is enough (docs/tensor-parallel.md).

use cudarc::nccl::{result::NcclError, Comm, Id, ReduceOp};

use crate::{Buffer, Error, Gpu};

/// NCCL's rendezvous token: made once, given to every rank's [`Communicator::join`].
#[derive(Clone, Copy, Debug)]
pub struct UniqueId(Id);

/// Whether `libnccl` can be loaded (without loading it for good).
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library by the names cudarc would use.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

fn nccl_error(op: impl Into<String>) -> impl FnOnce(NcclError) -> Error {
    let op = op.into();
    move |e| Error::Nccl {
        op,
        message: format!("{e:?}"),
    }
}

impl UniqueId {
    /// A fresh token (`ncclGetUniqueId`).
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] without `libnccl.so`; [`Error::Nccl`] if NCCL fails.
    pub fn new() -> Result<UniqueId, Error> {
        if !available() {
            return Err(Error::LibraryMissing { library: "nccl" });
        }
        Id::new()
            .map(UniqueId)
            .map_err(nccl_error("ncclGetUniqueId"))
    }
}

/// One rank's member of an NCCL communicator, bound to its [`Gpu`]'s stream.
pub struct Communicator {
    comm: Comm,
    gpu: Gpu,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.comm.rank())
            .field("world_size", &self.comm.world_size())
            .finish_non_exhaustive()
    }
}

impl Communicator {
    /// Joins communicator `id` as `rank` of `world_size`, on `gpu` (one GPU per rank:
    /// NCCL refuses two ranks on one device). Blocks until every rank has joined.
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] without `libnccl.so`; [`Error::Nccl`] if NCCL fails.
    pub fn join(
        gpu: &Gpu,
        rank: usize,
        world_size: usize,
        id: UniqueId,
    ) -> Result<Communicator, Error> {
        if !available() {
            return Err(Error::LibraryMissing { library: "nccl" });
        }
        let comm = Comm::from_rank(gpu.stream().clone(), rank, world_size, id.0).map_err(
            nccl_error(format!("ncclCommInitRank (rank {rank} of {world_size})")),
        )?;
        Ok(Communicator {
            comm,
            gpu: gpu.clone(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// `ncclAllGather` of bytes: every rank's `send` (one length on every rank) stacked in
    /// rank order into `recv` (`world_size` times as long). Stream ordered.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for buffers of other lengths or GPUs; [`Error::Nccl`].
    pub fn all_gather(&self, send: &Buffer, recv: &mut Buffer) -> Result<(), Error> {
        let n = self.world_size();
        if recv.len() != send.len() * n
            || !send.gpu().same(&self.gpu)
            || !recv.gpu().same(&self.gpu)
        {
            return Err(Error::InvalidArgument(format!(
                "all-gather of {} bytes into {} bytes over {n} ranks (must be {n} times as long, both on the rank's GPU)",
                send.len(),
                recv.len()
            )));
        }
        self.comm
            .all_gather(send.slice(), recv.slice_mut())
            .map(|_| ())
            .map_err(nccl_error(format!("ncclAllGather of {} bytes", send.len())))
    }

    /// `ncclAllReduce` (sum) of `buf` as f32 elements, in place — NCCL's own reduction,
    /// whose association depends on its algorithm and the rank count (for comparison in
    /// benchmarks; tessel's deterministic reduction is an all-gather and a fixed tree).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a length not a multiple of 4 or another GPU's buffer;
    /// [`Error::Nccl`].
    pub fn all_reduce_f32(&self, buf: &mut Buffer) -> Result<(), Error> {
        if buf.len() % 4 != 0 || !buf.gpu().same(&self.gpu) {
            return Err(Error::InvalidArgument(format!(
                "f32 all-reduce of {} bytes (a multiple of 4 on the rank's GPU)",
                buf.len()
            )));
        }
        let n = buf.len() / 4;
        // SAFETY: the buffer is `4 n` bytes; f32 has no invalid bit patterns.
        let mut view =
            unsafe { buf.slice_mut().transmute_mut::<f32>(n) }.expect("4 n bytes hold n f32");
        self.comm
            .all_reduce_in_place(&mut view, &ReduceOp::Sum)
            .map(|_| ())
            .map_err(nccl_error(format!("ncclAllReduce of {n} f32")))
    }
}
