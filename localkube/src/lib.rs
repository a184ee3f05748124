//! Local control plane (in progress).
