//! tessel-ir (placeholder)
