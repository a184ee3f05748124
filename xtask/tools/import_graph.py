#!/usr/bin/env python3
"""Module import graph of a Rust crate, and its cycles.

Usage: import_graph.py [--top] CRATE_SRC_DIR...   (e.g. xtask/src localkube/src)

How the graph is drawn: one node per `.rs` file under src/ (its module path:
`a/b.rs` and `a/b/mod.rs` are `a::b`; lib.rs/main.rs is the crate root).
Comments, strings and char literals are removed first. An edge A -> B is
drawn when code in file A names module B, or an item in it, by a path:
`crate::b::..`, `super::..`, `self::..`, or `child::..` for a module in scope
by its bare name, inside `use` trees (braces expanded) as well as in
expressions and types. Inline `mod x { .. }` blocks (tests) count as part
of their file, with `super` resolved from inside them. A path to an item
the target re-exports with `pub use` is followed to where it is defined.
`mod x;` declarations are containment, not edges; references to other
crates are not edges (crates cannot form cycles). With --top every module
is collapsed onto its top-level module (`chaos::infra` -> `chaos`) and
edges inside one top-level module are dropped. Cycles are the strongly
connected components with more than one node (Tarjan).
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src):
    """Source with comments, strings and char literals blanked out."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'(b|c)?r#*"', src[i:i + 8]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'(b|c)?r(#*)"', src[i:])
            end = '"' + m.group(2)
            j = src.find(end, i + m.end())
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                i += m.end()
                out.append("' '")
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src_dir, path):
    rel = os.path.relpath(path, src_dir)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        rel = []
    return tuple(rel)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (as segment lists)."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"\bas" + IDENT, "", tree)  # removed whitespace glued `as x`
    paths = []

    def walk(prefix, s):
        depth, parts, cur = 0, [], ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        for p in parts:
            if not p:
                continue
            k = p.find("{")
            if k >= 0:
                head = [x for x in p[:k].split("::") if x]
                walk(prefix + head, p[k + 1:p.rfind("}")])
            else:
                paths.append(prefix + [x for x in p.split("::") if x])

    walk([], tree)
    return paths


def scan(text):
    """(inline-module path, segment list) for every path in the file."""
    refs = []
    stack = []  # (inline module name, brace depth at which it opened)
    depth = 0
    pending = None
    tokens = re.finditer(
        r"\buse\s+([^;]*);|\bmod\s+(" + IDENT + r")\s*([{;])|\b((?:" + IDENT + r"\s*::\s*)+" + IDENT + r")|[{}]",
        text,
    )
    for m in tokens:
        tok = m.group(0)
        inline = tuple(name for name, _ in stack)
        if m.group(1) is not None:
            for p in expand_use(m.group(1)):
                refs.append((inline, p))
        elif m.group(2) is not None:
            if m.group(3) == "{":
                depth += 1
                stack.append((m.group(2), depth))
        elif m.group(4) is not None:
            refs.append((inline, re.sub(r"\s+", "", m.group(4)).split("::")))
        elif tok == "{":
            depth += 1
        elif tok == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
    del pending
    return refs


def reexports(text):
    """Names this file makes public with `pub use x::Name`: name -> path."""
    out = {}
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", text):
        for p in expand_use(m.group(1)):
            if p and p[-1] not in ("*", "self"):
                out[p[-1]] = p
    return out


def graph(src_dir):
    files = {}
    for root, _, names in os.walk(src_dir):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(src_dir, path)] = strip(open(path).read())
    modules = set(files)
    inline = set()
    for mod, text in files.items():
        for inl, _ in scan(text):
            for k in range(1, len(inl) + 1):
                inline.add(mod + inl[:k])
    known = modules | inline
    pubs = {mod: reexports(text) for mod, text in files.items()}

    def owner(abs_path):
        """The file module that defines abs_path, following re-exports."""
        for _ in range(8):
            k = len(abs_path)
            while k > 0 and tuple(abs_path[:k]) not in modules:
                k -= 1
            mod = tuple(abs_path[:k])
            rest = abs_path[k:]
            if rest and rest[0] in pubs.get(mod, {}):
                target = resolve(mod, list(pubs[mod][rest[0]]))
                if target is None:  # re-exported from another crate
                    return mod
                abs_path = target + rest[1:]
                continue
            return mod
        return mod

    def resolve(here, segs):
        if not segs:
            return None
        if segs[0] == "crate":
            base, segs = [], segs[1:]
        elif segs[0] in ("self", "super"):
            base = list(here)
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    if not base:
                        return None
                    base.pop()
                segs = segs[1:]
        elif tuple(here) + (segs[0],) in known:
            base = list(here)
        else:
            return None  # another crate, a std path, a local item or variable
        return base + segs

    edges = {m: set() for m in modules}
    for mod, text in files.items():
        for inl, segs in scan(text):
            here = mod + inl
            abs_path = resolve(here, [s for s in segs if s != "*"])
            if abs_path is None:
                continue
            target = owner(abs_path)
            # a path into this file's own inline modules stays in the file
            if target != mod and not (target[: len(mod)] == mod and target not in modules):
                edges[mod].add(target)
    return edges


def collapse(edges):
    top = {}
    for a, bs in edges.items():
        ta = a[:1]
        top.setdefault(ta, set())
        for b in bs:
            tb = b[:1]
            if tb != ta and ta and tb:
                top[ta].add(tb)
    return top


def sccs(edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "(root)"


def main(argv):
    top = "--top" in argv
    dirs = [a for a in argv if a != "--top"]
    cycles_total = 0
    for src_dir in dirs:
        edges = graph(src_dir)
        if top:
            edges = collapse(edges)
        print(f"# {src_dir}{' (top-level modules)' if top else ''}: {len(edges)} modules, "
              f"{sum(len(v) for v in edges.values())} edges")
        for a in sorted(edges):
            print(f"{name(a)} -> {', '.join(name(b) for b in sorted(edges[a])) or '-'}")
        cycles = sccs(edges)
        cycles_total += len(cycles)
        for c in cycles:
            print(f"CYCLE ({len(c)}): {', '.join(name(m) for m in c)}")
        if not cycles:
            print("no cycles")
    return 1 if cycles_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
