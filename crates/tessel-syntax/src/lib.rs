//! tessel-syntax (placeholder)
