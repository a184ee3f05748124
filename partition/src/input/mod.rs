//! Readers of the pipeline's inputs: DGL's chunked graph format
//! (metadata.json) and the seed's text format (xxx_nodes.txt /
//! xxx_edges.txt). Every error names the file and the line, or chunk and row.
