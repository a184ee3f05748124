# DGL 2.1.0 as the reference: builds the test graph the Rust test wrote
# (<dir>/input: graph.json + .npy arrays), partitions it with
# dgl.distributed.partition_graph(part_method="random", return_mapping=True)
# into <dir>/ref, and derives DGL's assignment per original node from its
# output: <dir>/assignment.txt, one part per line in homogeneous id order
# (node types in graph.json order). Also saves DGL's shuffled -> original id
# maps to <dir>/ref_orig.pt for check_partitions.py.
#
# usage: dgl_reference.py <dir> <num_parts>
import json
import os
import sys

import numpy as np
import torch
import dgl

folder, num_parts = sys.argv[1], int(sys.argv[2])
meta = json.load(open(os.path.join(folder, "input", "graph.json")))


def arr(name):
    return torch.from_numpy(np.load(os.path.join(folder, "input", name + ".npy")))


def canonical(e):
    return (e["src"], e["rel"], e["dst"])


ntypes = [t["name"] for t in meta["ntypes"]]
etypes = [canonical(e) for e in meta["etypes"]]
counts = {t["name"]: t["count"] for t in meta["ntypes"]}
edges = {canonical(e): (arr("e%d_src" % i), arr("e%d_dst" % i)) for i, e in enumerate(meta["etypes"])}
if meta["homogeneous"]:
    g = dgl.graph(edges[etypes[0]], num_nodes=counts[ntypes[0]], idtype=torch.int64)
else:
    g = dgl.heterograph(edges, num_nodes_dict=counts, idtype=torch.int64)
# DGL sorts types by name; the test graph must already be in that order so
# that homogeneous ids (and node_map) mean the same on both sides.
assert g.ntypes == ntypes, (g.ntypes, ntypes)
assert g.canonical_etypes == etypes, (g.canonical_etypes, etypes)
for i, t in enumerate(meta["ntypes"]):
    for f in t["feats"]:
        g.nodes[t["name"]].data[f] = arr("n%d_%s" % (i, f))
for i, e in enumerate(meta["etypes"]):
    for f in e["feats"]:
        g.edges[canonical(e)].data[f] = arr("e%d_%s" % (i, f))

out = os.path.join(folder, "ref")
orig_nids, orig_eids = dgl.distributed.partition_graph(
    g, "ref", num_parts, out, part_method="random", return_mapping=True
)
if not isinstance(orig_nids, dict):
    orig_nids = {ntypes[0]: orig_nids}
    orig_eids = {etypes[0]: orig_eids}
orig_nids = {k: v for k, v in orig_nids.items()}
orig_eids = {":".join(k): v for k, v in orig_eids.items()}
torch.save({"nids": orig_nids, "eids": orig_eids}, os.path.join(folder, "ref_orig.pt"))

assignment = {t: np.full(counts[t], -1, dtype=np.int64) for t in ntypes}
config = os.path.join(out, "ref.json")
for p in range(num_parts):
    part, _, _, gpb, _, names, _ = dgl.distributed.load_partition(config, p, load_feats=False)
    inner = part.ndata["inner_node"].bool()
    type_ids, per_type = gpb.map_to_per_ntype(part.ndata[dgl.NID][inner])
    for t, name in enumerate(names):
        assignment[name][orig_nids[name][per_type[type_ids == t]].numpy()] = p
flat = np.concatenate([assignment[t] for t in ntypes])
assert (flat >= 0).all(), "every node is inner in exactly one DGL partition"
np.savetxt(os.path.join(folder, "assignment.txt"), flat, fmt="%d")
print("reference: %d nodes, %d edges, %d parts" % (g.num_nodes(), g.num_edges(), num_parts))
