//! tessel-ref (placeholder)
