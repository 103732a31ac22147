//! tessel-ptx (placeholder)
