//! Ownership, shuffled ids and per-partition arrays.
