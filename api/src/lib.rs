//! DGLJob API (in progress).
