//! tessel-math (placeholder)
