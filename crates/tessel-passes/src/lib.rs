//! tessel-passes (placeholder)
