# Loads the partitions dgl-partition wrote (and, when given, DGL's own) through
# DGL 2.1.0's load_partition, run with DGL_DIST_DEBUG=1 so that
# _verify_dgl_partition checks every part, and checks:
# - ours: the layout DistGraph relies on (inner nodes first with
#   _ID = part start + i, EIDs contiguous and etype-major, reserved dtypes,
#   _TYPE for heterographs only, every edge an in-edge of an inner node,
#   halo = sources of owned edges that live elsewhere) and every feature row
#   equal to the input row of its original node / edge;
# - against DGL's output for the same assignment: node_map, edge_map, the
#   inner node set per part (original ids), the owned edge set per part as
#   (etype, original src, original dst, original eid), the halo set, and
#   feature names / dtypes / shapes. Edge order inside a part differs
#   legitimately (DGL orders a part's edges by its in-CSR, we by (etype,
#   original id)), so edges are compared as sets, and so are nodes (DGL's
#   sort by part is not stable, so the order inside (part, type) may differ).
#   DGL's partition_graph also keeps out-neighbours as halo nodes with
#   non-inner edges; we (like DGL's distributed pipeline) keep the in-edge
#   halo only, which is compared.
#
# usage: check_partitions.py <dir> <ours.json> [<ref.json>]
# <dir>/input holds the graph (graph.json + .npy); <dir>/ref_orig.pt DGL's maps.
import json
import os
import sys

import numpy as np
import torch
import dgl
from dgl.data.utils import load_tensors

assert "DGL_DIST_DEBUG" in os.environ, "run with DGL_DIST_DEBUG=1"
folder = sys.argv[1]
meta = json.load(open(os.path.join(folder, "input", "graph.json")))
hetero = not meta["homogeneous"]


def arr(name):
    return torch.from_numpy(np.load(os.path.join(folder, "input", name + ".npy")))


def etype_name(e):
    return "%s:%s:%s" % (e["src"], e["rel"], e["dst"])


node_input = {t["name"]: {f: arr("n%d_%s" % (i, f)) for f in t["feats"]} for i, t in enumerate(meta["ntypes"])}
edge_input = {etype_name(e): {f: arr("e%d_%s" % (i, f)) for f in e["feats"]} for i, e in enumerate(meta["etypes"])}


def our_orig_maps(config, num_parts):
    """Shuffled per-type id -> original per-type id, from orig_*.dgl."""
    base = os.path.dirname(config)
    nids, eids = {}, {}
    for p in range(num_parts):
        for name, into in (("orig_nids.dgl", nids), ("orig_eids.dgl", eids)):
            for k, v in load_tensors(os.path.join(base, "part%d" % p, name)).items():
                into.setdefault(k, []).append(v)
    cat = lambda d: {k: torch.cat(v) for k, v in d.items()}
    return cat(nids), cat(eids)


def typed_start(id_map, name, p):
    """First per-type shuffled id of type `name` in part p."""
    return sum(e - s for s, e in id_map[name][:p])


def describe(config, nid_orig, eid_orig, ours):
    meta_out = json.load(open(config))
    num_parts = meta_out["num_parts"]
    desc = {"node_map": meta_out["node_map"], "edge_map": meta_out["edge_map"], "parts": []}
    for p in range(num_parts):
        g, nfeat, efeat, gpb, _, ntypes, etypes = dgl.distributed.load_partition(config, p)
        nid, eid = g.ndata[dgl.NID], g.edata[dgl.EID]
        ntids, nper = gpb.map_to_per_ntype(nid)
        etids, eper = gpb.map_to_per_etype(eid)
        orig = [(ntypes[t], int(nid_orig[ntypes[t]][i])) for t, i in zip(ntids.tolist(), nper.tolist())]
        inner = g.ndata["inner_node"].bool()
        src, dst = g.edges()
        inner_edge = g.edata["inner_edge"].bool()
        edges = set()
        for j in torch.nonzero(inner_edge).flatten().tolist():
            name = ":".join(etypes[etids[j]])
            edges.add((name, orig[src[j]], orig[dst[j]], int(eid_orig[name][eper[j]])))
        inner_set = {orig[i] for i in range(g.num_nodes()) if inner[i]}
        halo_set = {orig[i] for i in range(g.num_nodes()) if not inner[i]}
        srcs = {e[1] for e in edges}
        part = {
            "sources_outside": srcs - inner_set,
            "inner": inner_set,
            "halo": halo_set,
            "edges": edges,
            "non_inner_edges": int((~inner_edge).sum()),
            "halo_is_outside_sources": halo_set == srcs - inner_set,
            "feats": {k: (str(v.dtype), tuple(v.shape[1:])) for k, v in list(nfeat.items()) + list(efeat.items())},
        }
        check_features(meta_out, p, nfeat, efeat, nid_orig, eid_orig)
        if ours:
            check_layout(g, gpb, p, meta_out, ntids, etids)
        desc["parts"].append(part)
    return desc


def check_features(meta_out, p, nfeat, efeat, nid_orig, eid_orig):
    want = {"%s/%s" % (t, f) for t, fs in node_input.items() for f in fs}
    assert set(nfeat) == want, (sorted(nfeat), sorted(want))
    want = {"%s/%s" % (e, f) for e, fs in edge_input.items() for f in fs}
    assert set(efeat) == want, (sorted(efeat), sorted(want))
    for feats, inputs, id_map, orig in ((nfeat, node_input, "node_map", nid_orig), (efeat, edge_input, "edge_map", eid_orig)):
        for key, x in feats.items():
            name, f = key.rsplit("/", 1)
            start = typed_start(meta_out[id_map], name, p)
            rows = orig[name][start : start + len(x)]
            s, e = meta_out[id_map][name][p]
            assert len(x) == e - s, (key, len(x), e - s)
            assert torch.equal(x, inputs[name][f][rows]), "feature %s of part %d follows its node/edge" % (key, p)


def check_layout(g, gpb, p, meta_out, ntids, etids):
    assert g.idtype == torch.int64
    num_inner = int(g.ndata["inner_node"].sum())
    starts = [r[p][0] for r in meta_out["node_map"].values()]
    ends = [r[p][1] for r in meta_out["node_map"].values()]
    start, end = min(starts), max(ends)
    assert num_inner == end - start
    nid = g.ndata[dgl.NID]
    assert torch.equal(nid[:num_inner], torch.arange(start, end)), "inner nodes first, _ID = start + i"
    assert bool(g.ndata["inner_node"][:num_inner].all()) and not bool(g.ndata["inner_node"][num_inner:].any())
    estart = min(r[p][0] for r in meta_out["edge_map"].values())
    assert torch.equal(g.edata[dgl.EID], torch.arange(estart, estart + g.num_edges())), "local edge j = estart + j"
    assert bool(g.edata["inner_edge"].all())
    _, dst = g.edges()
    assert bool((dst < num_inner).all()), "every edge is an in-edge of an inner node"
    dtypes = {dgl.NID: torch.int64, "inner_node": torch.uint8}
    edtypes = {dgl.EID: torch.int64, "inner_edge": torch.uint8}
    if hetero:
        dtypes[dgl.NTYPE] = torch.int16
        edtypes[dgl.ETYPE] = torch.int32
        assert torch.equal(g.ndata[dgl.NTYPE].long(), ntids.long())
        assert torch.equal(g.edata[dgl.ETYPE].long(), etids.long())
        assert bool((etids[1:] >= etids[:-1]).all()), "edges etype-major"
    assert {k: v.dtype for k, v in g.ndata.items()} == dtypes, g.ndata
    assert {k: v.dtype for k, v in g.edata.items()} == edtypes, g.edata


ours_config = sys.argv[2]
ours_meta = json.load(open(ours_config))
ours = describe(ours_config, *our_orig_maps(ours_config, ours_meta["num_parts"]), ours=True)
for p, part in enumerate(ours["parts"]):
    assert part["halo_is_outside_sources"], "part %d: halo = sources of owned edges outside the part" % p
    assert part["non_inner_edges"] == 0
total_edges = sum(len(part["edges"]) for part in ours["parts"])
assert total_edges == ours_meta["num_edges"]
print("ours: %d parts load with DGL_DIST_DEBUG=1, layout and features ok" % ours_meta["num_parts"])

if len(sys.argv) > 3:
    ref_orig = torch.load(os.path.join(folder, "ref_orig.pt"))
    ref = describe(sys.argv[3], ref_orig["nids"], ref_orig["eids"], ours=False)
    assert ours["node_map"] == ref["node_map"], (ours["node_map"], ref["node_map"])
    assert ours["edge_map"] == ref["edge_map"], (ours["edge_map"], ref["edge_map"])
    for p, (a, b) in enumerate(zip(ours["parts"], ref["parts"])):
        assert a["inner"] == b["inner"], "part %d inner nodes" % p
        assert a["edges"] == b["edges"], "part %d owned edges (as sets)" % p
        assert a["feats"] == b["feats"], (p, a["feats"], b["feats"])
        # DGL's in-memory partition_graph (GetSubgraphWithHalo in
        # src/graph/transform/partition_hetero.cc) also adds the out-edges of
        # inner nodes and their destinations as halo (non-inner edges); its
        # distributed pipeline (convert_partition.py) and we keep only the
        # sources of owned edges. Those must agree.
        assert a["halo"] == b["sources_outside"], "part %d halo = sources of owned edges outside" % p
        assert a["halo"] <= b["halo"], "part %d halo within DGL's" % p
    extra = [(len(b["halo"] - a["halo"]), b["non_inner_edges"]) for a, b in zip(ours["parts"], ref["parts"])]
    print("same as DGL: node_map, edge_map, inner nodes, owned edges, in-edge halo nodes, features "
          "(DGL's parts also hold (out-neighbour halo nodes, non-inner edges) = %s)" % extra)
