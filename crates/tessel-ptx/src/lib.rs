//! tessel-ptx: the PTX back end. Kernel IR in, PTX text out; `ptxas` checks what comes out.

pub mod ptxas;
