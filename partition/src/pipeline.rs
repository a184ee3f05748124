//! The stages in order.
