# Builds each partition's graph.dgl with DGL's own Python from the arrays the
# Rust pipeline wrote (embedded in dgl-partition; see output/graph_py.rs).
#
# Protocol: argv[1] = torch threads. Prints "ready <import seconds>", then
# reads one JSON job per stdin line and answers "done <part> <seconds>" after
# saving it. Any error ends the process with a traceback and a non-zero code.
#
# The graph is what DGL 2.1.0's tools/distpartitioning/convert_partition.py
# (create_dgl_object) saves: one homogeneous DGLGraph, inner nodes first,
# ndata _ID (int64), inner_node (uint8), _TYPE (int16, heterographs); edata
# _ID (int64, part-local edge j = edge_start + j), inner_edge (uint8),
# _TYPE (int32, heterographs; edges etype-major). Dtypes as
# python/dgl/distributed/partition.py RESERVED_FIELD_DTYPE.
import gc
import json
import os
import sys
import time

start = time.time()
# The collector's passes over torch's and DGL's modules while they import
# cost a few hundred ms of CPU and free nothing: off until they are in.
gc.disable()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import dgl  # noqa: E402

gc.enable()

torch.set_num_threads(max(1, int(sys.argv[1])))
print("ready %.3f" % (time.time() - start), flush=True)


def load(folder, name):
    path = os.path.join(folder, name)
    try:
        # Copy-on-write maps: no read of the file up front, and writable so
        # torch.from_numpy does not warn.
        arr = np.load(path, mmap_mode="c")
    except ValueError:  # an empty array cannot be mapped
        arr = np.load(path)
    return torch.from_numpy(arr)


def repeat_ids(counts, dtype):
    ids = torch.arange(len(counts), dtype=dtype)
    return torch.repeat_interleave(ids, torch.tensor(counts, dtype=torch.int64))


def build(job):
    folder = job["arrays"]
    src, dst = load(folder, "src.npy"), load(folder, "dst.npy")
    halo = load(folder, "halo_nid.npy")
    num_inner = job["num_inner"]
    num_nodes = num_inner + len(halo)
    g = dgl.graph((src, dst), num_nodes=num_nodes, idtype=torch.int64)
    node_start = job["node_start"]
    inner_ids = torch.arange(node_start, node_start + num_inner, dtype=torch.int64)
    g.ndata[dgl.NID] = torch.cat([inner_ids, halo])
    inner = torch.zeros(num_nodes, dtype=torch.uint8)
    inner[:num_inner] = 1
    g.ndata["inner_node"] = inner
    num_edges = g.num_edges()
    edge_start = job["edge_start"]
    g.edata[dgl.EID] = torch.arange(edge_start, edge_start + num_edges, dtype=torch.int64)
    g.edata["inner_edge"] = torch.ones(num_edges, dtype=torch.uint8)
    if job["hetero"]:
        inner_types = repeat_ids(job["inner_ntype_counts"], torch.int16)
        g.ndata[dgl.NTYPE] = torch.cat([inner_types, load(folder, "halo_ntype.npy")])
        g.edata[dgl.ETYPE] = repeat_ids(job["etype_counts"], torch.int32)
    dgl.save_graphs(job["out"], [g])


for line in sys.stdin:
    if not line.strip():
        continue
    job = json.loads(line)
    began = time.time()
    build(job)
    print("done %d %.3f" % (job["part"], time.time() - began), flush=True)
