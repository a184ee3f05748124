//! DGLJob controller (in progress).
