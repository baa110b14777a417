#!/usr/bin/env python3
"""The tree's structure rules, checked over the library crates' sources: no file over the line limit (Rust and
CUDA), no `#[path]` attribute, and no import cycle between the Rust files of one crate. Prints each problem on
one line, starting with its file, and exits 1 when there is any; exits 0 on a clean tree.

The import graph is file to file: an arrow a -> b means file a names an item that file b defines, through a
`use` (grouped, renamed, glob) or a `crate::` / `super::` / `self::` path written in code (or a path that
starts with a module or a name imported into the module). Names are followed through re-exports (`pub use`)
to the file that defines them; a `mod x;` declaration is no arrow, nor is a method called on a value (its
`impl` may live in another file). Left out: test modules (`#[cfg(test)]`, which import whatever they test),
and arrows between a folder's module file and the files inside it (one room: a child sees its parent's
items, the parent composes its children). A strongly connected set of more than one file is a cycle,
printed with the names that tie it. `--arrows` prints the whole graph.

Standard library only (python3). `--self-test` checks the checker on small crates it writes to a temp dir.
"""

import argparse
import os
import subprocess
import sys
import tempfile

DEFAULT_FOLDERS = ["fuse-ir/src", "fuse-macros/src", "fuse-runtime/src", "fuse-models/src", "src"]
DEFAULT_MAX_LINES = 600
SOURCE_SUFFIXES = (".rs", ".cu", ".cuh")

# Keywords after which an identifier is the name of an item the module defines.
ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "union", "const", "static"}
NOT_A_NAME = {"fn", "mut", "unsafe", "async", "extern", "_", "impl", "for", "dyn"}


# --- Lexing -------------------------------------------------------------------------------------------------


def tokens_of(text):
    """Rust source as (kind, value, line) tokens, comments dropped, literals reduced to one `lit` token. Kinds:
    `id` (identifiers, `r#` removed), `::`, `p` (any other punctuation, one character) and `lit`."""
    out = []
    i, n, line = 0, len(text), 1

    def skip_string(j):
        # j is just after the opening quote; returns the index just after the closing one.
        nonlocal line
        while j < n:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == "\n":
                line += 1
            if c == '"':
                return j + 1
            j += 1
        return j

    def skip_raw_string(j):
        # j is at the first `#` or the quote after `r` / `br`.
        nonlocal line
        hashes = 0
        while j < n and text[j] == "#":
            hashes += 1
            j += 1
        j += 1  # the opening quote
        close = '"' + "#" * hashes
        end = text.find(close, j)
        end = n if end < 0 else end
        line += text.count("\n", j, end)
        return min(n, end + len(close))

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
        elif c == '"':
            start, j = line, i
            i = skip_string(i + 1)
            out.append(("str", text[j + 1 : i - 1], start))
        elif c in "rbc" and is_raw_string_start(text, i):
            start = line
            j = i + 1 if c in "rc" else i + 2
            if c == "c" and j < n and text[j] == '"':
                i = skip_string(j + 1)
            elif c == "b" and text[i + 1] == '"':
                i = skip_string(i + 2)
            else:
                i = skip_raw_string(j)
            out.append(("lit", "", start))
        elif c == "b" and text.startswith("b'", i):
            i = skip_char(text, i + 1)
            out.append(("lit", "", line))
        elif c == "'":
            if i + 1 < n and (text[i + 1] == "\\" or (i + 2 < n and text[i + 2] == "'")):
                i = skip_char(text, i)
                out.append(("lit", "", line))
            else:  # a lifetime or label
                j = i + 1
                while j < n and (text[j].isalnum() or text[j] == "_"):
                    j += 1
                out.append(("p", "'", line))
                i = j
        elif c.isalpha() or c == "_":
            j = i
            if text.startswith("r#", i) and i + 2 < n and (text[i + 2].isalpha() or text[i + 2] == "_"):
                j = i = i + 2
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(("id", text[i:j], line))
            i = j
        elif c.isdigit():
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_" or (text[j] == "." and j + 1 < n and text[j + 1].isdigit())):
                j += 1
            out.append(("lit", "", line))
            i = j
        elif text.startswith("::", i):
            out.append(("::", "::", line))
            i += 2
        elif c == "$" and text.startswith("$crate", i):
            out.append(("id", "crate", line))
            i += 6
        else:
            out.append(("p", c, line))
            i += 1
    return out


def is_raw_string_start(text, i):
    """Whether a string literal with a prefix (`r"`, `r#"`, `b"`, `br"`, `br#"`, `c"`) starts at i."""
    j = i
    if text[j] == "b" and j + 1 < len(text) and text[j + 1] == "r":
        j += 2
    elif text[j] == "b":
        return j + 1 < len(text) and text[j + 1] == '"'
    elif text[j] == "c":
        return j + 1 < len(text) and text[j + 1] == '"'
    else:
        j += 1
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        return False
    while j < len(text) and text[j] == "#":
        j += 1
    return j < len(text) and text[j] == '"'


def skip_char(text, i):
    """i is at the opening `'` of a character literal; returns the index after its closing `'`."""
    j = i + 1
    if j < len(text) and text[j] == "\\":
        j += 2
    else:
        j += 1
    end = text.find("'", j)
    return len(text) if end < 0 else end + 1


# --- Parsing: modules, items, imports, paths ----------------------------------------------------------------


class Module:
    """One module: the file it is written in, the names of the items it defines and what it imports."""

    def __init__(self, file):
        self.file = file
        self.defs = set()
        self.aliases = {}  # name -> (module the `use` is in, path segments)
        self.globs = []  # (module the `use` is in, path segments of the module globbed)


class Crate:
    def __init__(self, folder):
        self.folder = folder
        self.modules = {}  # module path (tuple) -> Module
        self.mounts = {}  # module path of a `#[path]` mount -> module path of the file mounted
        self.self_aliases = set()  # `extern crate self as name;`
        self.references = []  # (file, module, segments, line): every path to resolve
        self.globs = []  # (file, module, segments, line)
        self.path_attributes = []  # (file, line)
        self.test_modules = set()  # modules gated by `#[cfg(test)]`: their imports are left out of the graph

    def module(self, path):
        """The module at `path` (through `#[path]` mounts), or None."""
        path = tuple(path)
        for _ in range(8):
            if path in self.modules:
                return path
            mount = next((m for m in self.mounts if path[: len(m)] == m), None)
            if mount is None:
                return None
            path = self.mounts[mount] + path[len(mount) :]
        return None


def module_path_of(rel):
    """The module path of a file from its place under src/ (`a/b.rs` and `a/b/mod.rs` are `a::b`)."""
    parts = rel[: -len(".rs")].split("/")
    if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
        parts = parts[:-1]
    return tuple(parts)


def parse_use_tree(toks, i, prefix, leaves):
    """Parses a use tree at toks[i] under `prefix`; appends (alias, segments, is_glob) to leaves. Returns the
    index after the tree."""
    segs = list(prefix)
    while i < len(toks):
        kind, value, _ = toks[i]
        if kind == "id":
            segs.append(value)
            i += 1
            if i < len(toks) and toks[i][0] == "::":
                i += 1
                continue
            alias = value
            if i + 1 < len(toks) and toks[i][1] == "as" and toks[i][0] == "id":
                alias = toks[i + 1][1]
                i += 2
            if segs[-1] == "self":
                segs.pop()
                if alias == "self":
                    alias = segs[-1] if segs else None
            if alias and alias != "_" and segs:
                leaves.append((alias, segs, False))
            elif alias == "_" and segs:
                leaves.append((None, segs, False))
            return i
        if kind == "::":  # a leading `::`: a path outside the crate
            segs.append("::")
            i += 1
            continue
        if value == "*":
            leaves.append((None, segs, True))
            return i + 1
        if value == "{":
            i += 1
            while i < len(toks) and toks[i][1] != "}":
                i = parse_use_tree(toks, i, segs, leaves)
                if i < len(toks) and toks[i][1] == ",":
                    i += 1
            return i + 1
        return i + 1
    return i


def parse_file(crate, file, rel, text):
    toks = tokens_of(text)
    root = module_path_of(rel)
    crate.modules.setdefault(root, Module(file))
    # Each scope: (kind, module path); kind "mod" for a module's braces, "tl" for `thread_local! {`, else "block".
    stack = []
    # What the attributes before the next item say: the file a `#[path]` mounts, whether `#[cfg(test)]` gates it.
    pending_path, pending_test = None, False

    def current():
        for kind, path in reversed(stack):
            if kind == "mod":
                return path
        return root

    def at_module_scope():
        return not stack or stack[-1][0] == "mod"

    i = 0
    while i < len(toks):
        kind, value, line = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ("", "", line)
        if kind == "p" and value == "#":
            # An attribute: `#[path = ..]`, or `path = ..` inside `#[cfg_attr(..)]`.
            j = i + 1
            if j < len(toks) and toks[j][1] == "!":
                j += 1
            if j < len(toks) and toks[j][1] == "[":
                depth, k = 0, j
                while k < len(toks):
                    if toks[k][1] in ("[", "("):
                        depth += 1
                    elif toks[k][1] in ("]", ")"):
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                body = toks[j + 1 : k]
                names = [t[1] for t in body]
                if names[:2] == ["path", "="]:
                    crate.path_attributes.append((file, line))
                    pending_path = names[2] if len(body) > 2 and body[2][0] == "str" else None
                elif names == ["cfg", "(", "test", ")"]:
                    pending_test = True
                elif names[:1] == ["cfg_attr"] and any(
                    body[m][1] == "path" and m + 1 < len(body) and body[m + 1][1] == "=" and body[m - 1][1] == ","
                    for m in range(1, len(body))
                ):
                    crate.path_attributes.append((file, line))
                i = k + 1
                continue
        if kind == "id" and value == "mod" and nxt[0] == "id":
            after = toks[i + 2][1] if i + 2 < len(toks) else ""
            if pending_test:
                crate.test_modules.add(current() + (nxt[1],))
            if after == "{":
                stack.append(("mod", current() + (nxt[1],)))
                crate.modules.setdefault(current(), Module(file))
                i += 3
                pending_path, pending_test = None, False
                continue
            if after == ";" and pending_path:
                # A mounted file is named relative to the directory of the file that mounts it.
                target = os.path.normpath(os.path.join(os.path.dirname(rel), pending_path)).replace(os.sep, "/")
                if target.endswith(".rs") and not target.startswith(".."):
                    crate.mounts[current() + (nxt[1],)] = module_path_of(target)
            pending_path, pending_test = None, False
            i += 3
            continue
        if kind == "id" and value == "extern" and nxt[1] == "crate":
            # `extern crate self as name;`
            if i + 4 < len(toks) and toks[i + 2][1] == "self" and toks[i + 3][1] == "as":
                crate.self_aliases.add(toks[i + 4][1])
        if kind == "id" and value == "use":
            leaves = []
            j = parse_use_tree(toks, i + 1, [], leaves)
            while j < len(toks) and toks[j][1] != ";":
                j += 1
            module = crate.modules[current()]
            for alias, segs, is_glob in leaves:
                if segs and segs[0] == "::":
                    continue
                if is_glob:
                    module.globs.append((current(), segs))
                    crate.globs.append((file, current(), segs, line))
                else:
                    if alias:
                        module.aliases[alias] = (current(), segs)
                    crate.references.append((file, current(), segs, line))
            i = j + 1
            pending_path, pending_test = None, False
            continue
        if value in ("{", "}", ";"):
            pending_path, pending_test = None, False
        if value == "{":
            if i >= 2 and toks[i - 1][1] == "!" and toks[i - 2][1] == "thread_local":
                stack.append(("tl", None))
            else:
                stack.append(("block", None))
        elif value == "}":
            if stack:
                stack.pop()
        elif kind == "id" and value == "macro_rules" and nxt[1] == "!" and at_module_scope():
            if i + 2 < len(toks) and toks[i + 2][0] == "id":
                crate.modules[current()].defs.add(toks[i + 2][1])
        elif kind == "id" and value in ITEM_KEYWORDS and (at_module_scope() or (stack[-1][0] == "tl" and value == "static")):
            j = i + 1
            if value == "static" and j < len(toks) and toks[j][1] == "mut":
                j += 1
            if j < len(toks) and toks[j][0] == "id" and toks[j][1] not in NOT_A_NAME:
                is_union_item = value != "union" or (j + 1 < len(toks) and toks[j + 1][1] in ("{", "<"))
                previous = toks[i - 1][1] if i else ""
                if is_union_item and previous not in ("::", "&", "*", "->", "(", "<", ","):
                    crate.modules[current()].defs.add(toks[j][1])
        elif kind == "id" and nxt[0] == "::" and (i == 0 or toks[i - 1][0] != "::"):
            segs, j = [value], i + 1
            while j + 1 < len(toks) and toks[j][0] == "::" and toks[j + 1][0] == "id":
                segs.append(toks[j + 1][1])
                j += 2
            if len(segs) > 1:
                crate.references.append((file, current(), segs, line))
            i = j
            continue
        i += 1


# --- Resolution ---------------------------------------------------------------------------------------------


def resolve(crate, context, segs, seen=None):
    """What path `segs`, written in module `context`, names: ("item", file, name), ("module", path) or None
    (outside the crate, or not found). `seen` stops a lookup that comes back to where it was (globs of
    each other, an import of an outside crate by its own name)."""
    seen = set() if seen is None else seen
    if not segs:
        return None
    first = segs[0]
    if first == "crate" or first in crate.self_aliases:
        return walk(crate, (), segs[1:], seen)
    if first == "self":
        return walk(crate, context, segs[1:], seen)
    if first == "super":
        module = context
        while segs and segs[0] == "super":
            if not module:
                return None
            module, segs = module[:-1], segs[1:]
        return walk(crate, module, segs, seen)
    return walk(crate, context, segs, seen)


def walk(crate, module, segs, seen):
    """`segs` looked up from module `module` on: child modules, the items it defines, its imports, its globs."""
    module = crate.module(module)
    if module is None:
        return None
    if not segs:
        return ("module", module)
    if (module, tuple(segs)) in seen or len(seen) > 400:
        return None
    seen.add((module, tuple(segs)))
    name, rest = segs[0], segs[1:]
    child = crate.module(module + (name,))
    if child is not None:
        return walk(crate, child, rest, seen)
    info = crate.modules[module]
    if name in info.defs:
        return ("item", info.file, name)
    if name in info.aliases:
        context, target = info.aliases[name]
        # `use quote::quote;`: the path's first name is an outside crate, not this import.
        if not (target[0] == name and context == module):
            return resolve(crate, context, target + rest, seen)
    for context, target in info.globs:
        globbed = resolve(crate, context, target, seen)
        if globbed is not None and globbed[0] == "module":
            found = walk(crate, globbed[1], segs, seen)
            if found is not None:
                return found
    return None


# --- The checks ---------------------------------------------------------------------------------------------


def source_files(root, folder):
    base = os.path.join(root, folder)
    for directory, subdirs, names in os.walk(base):
        subdirs.sort()
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, root).replace(os.sep, "/"), os.path.relpath(path, base).replace(os.sep, "/")


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative: the components of the graph, each a sorted list."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def import_cycles(root, folder):
    """The import cycles between the Rust files under `folder` (one crate): a list of (files, arrows), arrows
    being {(a, b): names}. Paths are relative to the folder."""
    crate = Crate(folder)
    files = []
    for _, rel in source_files(root, folder):
        if rel.endswith(".rs"):
            with open(os.path.join(root, folder, rel), encoding="utf-8") as f:
                parse_file(crate, rel, rel, f.read())
            files.append(rel)
    # Test modules (and the files they mount) import what they test: they are no part of the library's graph.
    tests = crate.test_modules | {crate.mounts[t] for t in crate.test_modules if t in crate.mounts}

    def is_test(module):
        return any(module[: len(t)] == t for t in tests)

    def add(file, context, target, name):
        # A folder's module file and the files inside it are one room (a child sees its parent's items, the
        # parent composes its children): arrows between a file and its own ancestors do not count.
        a, b = module_path_of(file), module_path_of(target)
        if target == file or is_test(context) or a[: len(b)] == b or b[: len(a)] == a:
            return
        arrows.setdefault((file, target), set()).add(name)

    arrows = {}
    for file, context, segs, _ in crate.references:
        found = resolve(crate, context, segs)
        if found and found[0] == "item":
            add(file, context, found[1], found[2])
    for file, context, segs, _ in crate.globs:
        found = resolve(crate, context, segs)
        if found and found[0] == "module":
            add(file, context, crate.modules[found[1]].file, "*")
    edges = {}
    for a, b in arrows:
        edges.setdefault(a, set()).add(b)
    cycles = []
    for component in strongly_connected(files, edges):
        if len(component) > 1:
            members = set(component)
            tied = {k: v for k, v in arrows.items() if k[0] in members and k[1] in members}
            cycles.append((component, tied))
    return cycles, crate.path_attributes, arrows


def describe(arrows):
    return "; ".join(f"{a} -> {b}: {', '.join(sorted(names))}" for (a, b), names in sorted(arrows.items()))


def check(root, folders, max_lines, show_arrows=False):
    """Every problem, one line each, starting with its file (with `show_arrows`, every arrow too)."""
    problems = []
    for folder in folders:
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f"{folder}: no such folder")
            continue
        for path, _ in source_files(root, folder):
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = len(f.read().splitlines())
            if lines > max_lines:
                problems.append(f"{path}: {lines} lines (at most {max_lines})")
        cycles, path_attributes, arrows = import_cycles(root, folder)
        if show_arrows:
            for (a, b), names in sorted(arrows.items()):
                print(f"{folder}: {a} -> {b}: {', '.join(sorted(names))}")
        for rel, line in path_attributes:
            problems.append(f"{folder}/{rel}:{line}: a #[path] attribute (put the module's file where `mod` finds it)")
        for files, arrows in cycles:
            problems.append(
                f"{folder}/{files[0]}: import cycle of {len(files)} files ({', '.join(files)}): {describe(arrows)}"
            )
    return problems


# --- Self-test ----------------------------------------------------------------------------------------------


def write(base, rel, text):
    path = os.path.join(base, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def self_test():
    """Writes a crate with a cycle, a long file and a `#[path]`, and a clean crate that only looks like it has
    them, runs this script on each and checks what it reports."""
    bad = {
        "src/lib.rs": "//! Every problem once.\nmod a;\nmod b;\npub use a::A;\n#[path = \"elsewhere.rs\"]\nmod moved;\n",
        "src/a.rs": "//! a\nuse crate::b::{helper, B};\npub struct A;\npub fn f() -> B {\n    helper();\n    B\n}\n",
        # The arrow back is a path written in code, through the root's re-export.
        "src/b.rs": "//! b\npub struct B;\npub fn helper() {\n    let _ = crate::A;\n}\n",
        "src/long.cu": "// a long kernel\n" + "int x;\n" * 12,
        "src/elsewhere.rs": "//! mounted by path\n",
    }
    clean = {
        "src/lib.rs": "//! Re-exports are followed to what they name.\nmod a;\nmod b;\nmod c;\npub use a::A;\n"
        "pub use b::{Bee as Alias, B};\n",
        "src/a.rs": "//! a imports b (through the root) and c, in one grouped `use`.\n"
        "use crate::{c::{self, C}, Alias, B};\n"
        "// use crate::b::nothing; #[path = \"x.rs\"]\n"
        'const TEXT: &str = "use crate::a::A; #[path = \\"x\\"]";\n'
        "pub struct A(B, C, Alias);\npub fn g() -> &'static str {\n    c::h();\n    TEXT\n}\n",
        # A test module may import anything (what it tests and what it checks against): no part of the graph.
        "src/b.rs": "//! b imports nothing of a, but its tests do\npub struct B;\npub struct Bee;\n"
        "impl B {\n    pub fn a() {}\n}\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        # A folder's module file and the files in it are one room: they may name each other's items.
        "src/c/mod.rs": "//! c and its child\nmod d;\npub use d::C;\npub fn h() {\n    d::helper();\n}\n"
        "pub(crate) struct Shared;\n",
        "src/c/d.rs": "//! d\nuse super::Shared;\npub struct C;\npub fn helper() -> Shared {\n    Shared\n}\n",
        "src/ok.cuh": "// short\n" + "int y;\n" * 11,
    }
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, files in (("bad", bad), ("clean", clean)):
            for rel, text in files.items():
                write(os.path.join(tmp, name), rel, text)

        def run(name):
            command = [sys.executable, os.path.abspath(__file__), "--root", os.path.join(tmp, name)]
            done = subprocess.run(command + ["--max-lines", "12", "src"], capture_output=True, text=True)
            return done.returncode, [line for line in done.stdout.splitlines() if line.startswith("src/")]

        code, problems = run("bad")
        expected = {
            "cycle": "src/a.rs: import cycle of 2 files (a.rs, b.rs): a.rs -> b.rs: B, helper; b.rs -> a.rs: A",
            "long file": "src/long.cu: 13 lines (at most 12)",
            "#[path]": "src/lib.rs:5: a #[path] attribute",
        }
        if code != 1:
            failures.append(f"the crate with problems: exit {code}, expected 1")
        for what, line in expected.items():
            found = [p for p in problems if p.startswith(line)]
            if len(found) != 1:
                failures.append(f"the crate with problems: its {what} reported {len(found)} times, expected once")
        if len(problems) != len(expected):
            failures.append(f"the crate with problems: {len(problems)} problems, expected {len(expected)}: {problems}")
        code, problems = run("clean")
        if code != 0 or problems:
            failures.append(f"the clean crate: exit {code} with {problems}, expected 0 and nothing")
    for failure in failures:
        print(f"check-structure self-test: {failure}")
    print(f"check-structure self-test: {'failed' if failures else 'ok'}")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", default=DEFAULT_FOLDERS, help="source folders, one crate each")
    parser.add_argument("--max-lines", type=int, default=DEFAULT_MAX_LINES, help="longest file allowed")
    parser.add_argument(
        "--root",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
        help="the folders are relative to this (the repository)",
    )
    parser.add_argument("--self-test", action="store_true", help="check the checker, on crates it writes")
    parser.add_argument("--arrows", action="store_true", help="also print every arrow of the import graph")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.abspath(args.root), args.folders, args.max_lines, args.arrows)
    for problem in problems:
        print(problem)
    print(f"check-structure: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {', '.join(args.folders)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
