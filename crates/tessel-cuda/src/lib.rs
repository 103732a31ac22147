//! tessel-cuda (placeholder)
