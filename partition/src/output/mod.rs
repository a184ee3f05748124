//! Writers of what DGL 2.1.0 loads.
