//! The rule that keeps the house (docs/architecture.md), read from the sources themselves:
//!
//! * no file in `crates/*/src` imports a file that imports it back, directly or around a cycle;
//! * in `barrier`, no backend imports another (what two share lives in `algo/`; the hierarchical
//!   backend's device among the roots is a communicator whose selection names it), and every
//!   import points down the layers of the diagram (or sideways within a layer, without a cycle).
//!
//! Each crate is parsed with `syn` from its root (`lib.rs`, and `main.rs` as a crate of its
//! own), following `mod` declarations into files and into inline modules. What a file imports
//! is every path it names in a `use` item or in code that leads into the crate (`crate::…`,
//! `super::…`, `self::…`, a child module, or a name an earlier `use` brought in), resolved
//! through re-exports (`pub use`) to the file that defines the item. Items under a `cfg` that
//! is off in a normal build (`test`, `loom`) are left out; other `cfg`s (features, target
//! architectures) are read, since some build compiles them. Paths inside macro invocations are
//! not read, but an item macro whose body is items (`not_under_loom! { pub mod shm; }`) is.
//! `ARCH_DEBUG=1` prints every import found and the path behind it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// `barrier`'s top-level modules, lowest layer first (docs/architecture.md's diagram).
const LAYERS: &[&[&str]] = &[
    &["sys", "pad", "error", "text"],
    &["wait", "params"],
    &["sync"],
    &["shm", "mmio"],
    &["region", "transport"],
    &["watch", "ctrl"],
    &["backend"],
    &["algo"],
    &["compose"],
    &["backends"],
    &["registry", "engine"],
    &["selector"],
    &["comm", "universe"],
    &["hierarchy"],
];

/// A module's path below its crate root.
type Module = Vec<String>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A `use` item: its last segment may be a module.
    Use,
    /// A path in code: its last segment names an item (a value or a type), never a module.
    Code,
}

/// What one crate declares and names.
#[derive(Default)]
struct Crate {
    name: String,
    /// Every module (file or inline) and the file module that holds it.
    file_of: BTreeMap<Module, Module>,
    /// Names brought into a module by its `use` items: name -> (the module, the path as written).
    uses: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    /// Glob imports of a module (`use x::*`), as written.
    globs: BTreeMap<Module, Vec<Vec<String>>>,
    /// The names of the items each module defines.
    defined: BTreeMap<Module, BTreeSet<String>>,
    /// Every path named: (the module it is written in, the path as written, how).
    refs: Vec<(Module, Vec<String>, Kind)>,
}

/// Three-valued `cfg` evaluation: `test`, `loom` and `doc` are off; anything else may be on in
/// some build.
fn cfg_value(meta: &syn::Meta) -> Option<bool> {
    match meta {
        syn::Meta::Path(p) if p.is_ident("test") || p.is_ident("loom") || p.is_ident("doc") => Some(false),
        syn::Meta::List(list) => {
            let inner: Vec<syn::Meta> = list
                .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
                .map(|p| p.into_iter().collect())
                .unwrap_or_default();
            let values: Vec<Option<bool>> = inner.iter().map(cfg_value).collect();
            if list.path.is_ident("not") {
                values.first().copied().flatten().map(|v| !v)
            } else if list.path.is_ident("all") {
                if values.contains(&Some(false)) {
                    Some(false)
                } else {
                    values.iter().all(|v| *v == Some(true)).then_some(true)
                }
            } else if list.path.is_ident("any") {
                if values.contains(&Some(true)) {
                    Some(true)
                } else {
                    values.iter().all(|v| *v == Some(false)).then_some(false)
                }
            } else {
                None
            }
        }
        _ => None,
    }
}

/// False when a `cfg` attribute turns the item off in every normal build.
fn included(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .all(|a| a.parse_args::<syn::Meta>().ok().and_then(|m| cfg_value(&m)) != Some(false))
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace, if any.
fn defined_name(item: &syn::Item) -> Option<String> {
    use syn::Item::*;
    let ident = match item {
        Const(i) => &i.ident,
        Enum(i) => &i.ident,
        Fn(i) => &i.sig.ident,
        Mod(i) => &i.ident,
        Static(i) => &i.ident,
        Struct(i) => &i.ident,
        Trait(i) => &i.ident,
        TraitAlias(i) => &i.ident,
        Type(i) => &i.ident,
        Union(i) => &i.ident,
        Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// A macro body as items, if it is one.
fn parse_items(input: syn::parse::ParseStream<'_>) -> syn::Result<Vec<syn::Item>> {
    let mut items = Vec::new();
    while !input.is_empty() {
        items.push(input.parse()?);
    }
    Ok(items)
}

/// Collects the paths of code (and of `use` items inside functions) in one module.
struct Paths<'a> {
    module: &'a Module,
    found: Vec<(Module, Vec<String>, Kind)>,
    /// Names bound by `use` items inside functions and blocks, and glob sources there.
    bindings: Vec<(String, Vec<String>)>,
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if included(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Modules are read on their own, with their own path.
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, Vec::new(), &mut leaves);
        for (name, path) in leaves {
            self.found.push((self.module.clone(), path.clone(), Kind::Use));
            self.bindings.push((name, path));
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // A macro's body read as what it most often is: expressions separated by commas
        // (`vec!`, `format!`, `assert!`), or statements. Anything else is not read.
        type Exprs = syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>;
        if let Ok(exprs) = mac.parse_body_with(Exprs::parse_terminated) {
            exprs.iter().for_each(|e| self.visit_expr(e));
        } else if let Ok(stmts) = mac.parse_body_with(syn::Block::parse_within) {
            stmts.iter().for_each(|st| self.visit_stmt(st));
        }
        syn::visit::visit_macro(self, mac);
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if included(&local.attrs) {
            syn::visit::visit_local(self, local);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if included(&field.attrs) {
            syn::visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if included(&variant.attrs) {
            syn::visit::visit_variant(self, variant);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if included(&arm.attrs) {
            syn::visit::visit_arm(self, arm);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::TraitItem::Fn(f) => &f.attrs,
            syn::TraitItem::Const(c) => &c.attrs,
            syn::TraitItem::Type(t) => &t.attrs,
            _ => &[],
        };
        if included(attrs) {
            syn::visit::visit_trait_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            _ => &[],
        };
        if included(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(crate)`, `pub(super)`: who may see an item, not what it uses.
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.found.push((self.module.clone(), segments, Kind::Code));
        }
        syn::visit::visit_path(self, path);
    }
}

/// The leaves of a use tree: (the name it binds, the full path as written). A glob binds no
/// name (`*`).
fn use_leaves(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    let with = |name: String| {
        let mut p = prefix.clone();
        p.push(name);
        p
    };
    match tree {
        syn::UseTree::Path(p) => use_leaves(&p.tree, with(p.ident.to_string()), out),
        syn::UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.last().cloned().unwrap_or_default(), prefix.clone()));
        }
        syn::UseTree::Name(n) => out.push((n.ident.to_string(), with(n.ident.to_string()))),
        syn::UseTree::Rename(r) if r.ident == "self" => out.push((r.rename.to_string(), prefix.clone())),
        syn::UseTree::Rename(r) => out.push((r.rename.to_string(), with(r.ident.to_string()))),
        syn::UseTree::Glob(_) => out.push(("*".into(), prefix.clone())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, prefix.clone(), out)),
    }
}

impl Crate {
    /// Reads the crate whose root file is `root`; `read` gives a file's text (`None`: no file).
    fn read(name: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
        let mut krate = Crate { name: name.into(), ..Crate::default() };
        krate.load_file(Vec::new(), root, read);
        krate
    }

    fn load_file(&mut self, module: Module, path: &Path, read: &dyn Fn(&Path) -> Option<String>) {
        let text = read(path).unwrap_or_else(|| panic!("cannot read {}", path.display()));
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let is_root = matches!(path.file_name().and_then(|n| n.to_str()), Some("mod.rs" | "lib.rs" | "main.rs"));
        let dir = if is_root { path.parent().unwrap().to_path_buf() } else { path.with_extension("") };
        self.load_items(&module.clone(), module, &file.items, &dir, read);
    }

    fn load_items(
        &mut self,
        file: &Module,
        module: Module,
        items: &[syn::Item],
        dir: &Path,
        read: &dyn Fn(&Path) -> Option<String>,
    ) {
        self.file_of.insert(module.clone(), file.clone());
        // Items an item macro wraps (`not_under_loom! { pub mod shm; … }`) are items too.
        let expanded: Vec<Option<Vec<syn::Item>>> = items
            .iter()
            .map(|item| match item {
                syn::Item::Macro(m) if m.ident.is_none() && included(&m.attrs) => {
                    m.mac.parse_body_with(parse_items).ok()
                }
                _ => None,
            })
            .collect();
        let all: Vec<&syn::Item> = items
            .iter()
            .zip(&expanded)
            .flat_map(|(item, inner)| match inner {
                Some(inner) => inner.iter().collect::<Vec<_>>(),
                None => vec![item],
            })
            .collect();
        let mut paths = Paths { module: &module, found: Vec::new(), bindings: Vec::new() };
        for &item in all.iter().filter(|i| included(item_attrs(i))) {
            if let Some(name) = defined_name(item) {
                self.defined.entry(module.clone()).or_default().insert(name);
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child = module.clone();
                    child.push(name.clone());
                    match &m.content {
                        Some((_, inner)) => self.load_items(file, child, inner, &dir.join(&name), read),
                        None => {
                            let flat = dir.join(format!("{name}.rs"));
                            let path = if read(&flat).is_some() { flat } else { dir.join(&name).join("mod.rs") };
                            self.load_file(child, &path, read);
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, Vec::new(), &mut leaves);
                    for (name, path) in leaves {
                        if name == "*" {
                            self.globs.entry(module.clone()).or_default().push(path.clone());
                        } else {
                            self.uses.entry(module.clone()).or_default().insert(name, path.clone());
                        }
                        self.refs.push((module.clone(), path, Kind::Use));
                    }
                }
                other => paths.visit_item(other),
            }
        }
        self.refs.extend(paths.found);
        // A `use` inside a function binds its name there; read it as the module's, unless the
        // module binds the name itself.
        for (name, path) in paths.bindings {
            if name == "*" {
                self.globs.entry(module.clone()).or_default().push(path);
            } else {
                self.uses.entry(module.clone()).or_default().entry(name).or_insert(path);
            }
        }
    }

    /// Where a name that `module` neither defines nor binds comes from through one of its
    /// globs: the glob's source, if that defines or binds the name.
    fn through_glob(&self, module: &Module, name: &str, depth: usize) -> Option<Module> {
        if depth > 16 {
            return None;
        }
        for written in self.globs.get(module).into_iter().flatten() {
            let Some(source) = self.absolute(module, written, depth + 1) else { continue };
            if !self.file_of.contains_key(&source) {
                continue;
            }
            let mut child = source.clone();
            child.push(name.to_string());
            if self.file_of.contains_key(&child)
                || self.defined.get(&source).is_some_and(|d| d.contains(name))
                || self.uses.get(&source).is_some_and(|u| u.contains_key(name))
            {
                return Some(source);
            }
            if let Some(deeper) = self.through_glob(&source, name, depth + 1) {
                return Some(deeper);
            }
        }
        None
    }

    /// `path`, written in `from`, as a path from the crate root; `None` when it leads out of the
    /// crate (another crate, a local name, a generic).
    fn absolute(&self, from: &Module, path: &[String], depth: usize) -> Option<Module> {
        let first = path.first()?;
        let mut base = match first.as_str() {
            "crate" => return Some(path[1..].to_vec()),
            "super" | "self" => from.clone(),
            _ => {
                let mut child = from.clone();
                child.push(first.clone());
                let alias = self.uses.get(from).and_then(|u| u.get(first));
                // A `use` that shares a child module's name binds a value (`pub use
                // check::check`), which has no `::` below it: a longer path means the module.
                if self.file_of.contains_key(&child) && (path.len() > 1 || alias.is_none()) {
                    from.clone()
                } else if let Some(written) = alias {
                    if depth > 16 || written.first() == Some(first) && written.len() == 1 {
                        return None;
                    }
                    let mut target = self.absolute(from, written, depth + 1)?;
                    target.extend(path[1..].iter().cloned());
                    return Some(target);
                } else {
                    let mut target = self.through_glob(from, first, depth)?;
                    target.extend(path.iter().cloned());
                    return Some(target);
                }
            }
        };
        let mut rest = path.iter().peekable();
        while let Some(s) = rest.peek() {
            match s.as_str() {
                "super" => {
                    base.pop();
                }
                "self" => {}
                _ => break,
            }
            rest.next();
        }
        base.extend(rest.cloned());
        Some(base)
    }

    /// The file that defines what the absolute `path` names, following re-exports.
    fn resolve(&self, path: &Module, kind: Kind, depth: usize) -> Option<Module> {
        let mut here: Module = Vec::new();
        let mut all_modules = true;
        for (i, segment) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let mut child = here.clone();
            child.push(segment.clone());
            let reexport = self.uses.get(&here).and_then(|u| u.get(segment));
            let is_module = self.file_of.contains_key(&child);
            if is_module && !(kind == Kind::Code && last && reexport.is_some()) {
                here = child;
                continue;
            }
            if let (Some(written), true) = (reexport, depth < 16) {
                if let Some(mut target) = self.absolute(&here, written, 0) {
                    target.extend(path[i + 1..].iter().cloned());
                    return self.resolve(&target, kind, depth + 1);
                }
            }
            if let (Some(mut source), true) = (self.through_glob(&here, segment, 0), depth < 16) {
                source.extend(path[i..].iter().cloned());
                return self.resolve(&source, kind, depth + 1);
            }
            all_modules = false;
            break;
        }
        // A path in code never ends at a module: one that seems to is a local name (a variable,
        // a generic, `self`) that happens to share a module's.
        if kind == Kind::Code && all_modules {
            return None;
        }
        self.file_of.get(&here).cloned()
    }

    /// File module -> the file modules it imports.
    fn imports(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut graph: BTreeMap<Module, BTreeSet<Module>> =
            self.file_of.values().map(|f| (f.clone(), BTreeSet::new())).collect();
        for (from, path, kind) in &self.refs {
            let Some(absolute) = self.absolute(from, path, 0) else { continue };
            let Some(target) = self.resolve(&absolute, *kind, 0) else { continue };
            let file = &self.file_of[from];
            if &target != file {
                if std::env::var_os("ARCH_DEBUG").is_some() {
                    eprintln!("{}: {} -> {} via {:?} in {}", self.name, show(file), show(&target), path, show(from));
                }
                graph.get_mut(file).unwrap().insert(target);
            }
        }
        graph
    }
}

fn from_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Every crate of the workspace: each `crates/*/src/lib.rs` and `main.rs`.
fn workspace() -> Vec<Crate> {
    // This test lives in the workspace's own package (not in a crate that is published), so it
    // reads the sibling crates from the workspace root.
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates_dir).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for root in ["lib.rs", "main.rs"] {
            let path = dir.join("src").join(root);
            if path.exists() {
                out.push(Crate::read(&format!("{name} ({root})"), &path, &from_disk));
            }
        }
    }
    out
}

fn show(m: &Module) -> String {
    if m.is_empty() {
        "<root>".into()
    } else {
        m.join("/")
    }
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(graph: &BTreeMap<Module, BTreeSet<Module>>, start: &Module) -> Option<Vec<Module>> {
    fn walk(
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        at: &Module,
        start: &Module,
        path: &mut Vec<Module>,
        seen: &mut BTreeSet<Module>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.clone()];
    walk(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn cycles(krate: &Crate) -> Vec<String> {
    let graph = krate.imports();
    let mut found = Vec::new();
    for m in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, m) {
            let shown: Vec<String> = cycle.iter().map(show).collect();
            found.push(format!("{}: {} -> {}", krate.name, shown.join(" -> "), show(m)));
        }
    }
    found
}

/// Imports against `barrier`'s layers, and backends that import another backend.
fn layer_faults(krate: &Crate) -> Vec<String> {
    let layer = |m: &Module| m.first().and_then(|top| LAYERS.iter().position(|l| l.contains(&top.as_str())));
    let mut wrong = Vec::new();
    for (m, targets) in &krate.imports() {
        if m.is_empty() {
            continue;
        }
        let Some(mine) = layer(m) else {
            wrong.push(format!("{}: its top-level module is in no layer of LAYERS", show(m)));
            continue;
        };
        for t in targets {
            if layer(t).is_some_and(|theirs| theirs > mine) {
                wrong.push(format!("{} imports {}, a higher layer", show(m), show(t)));
            }
            let backend = |x: &Module| (x.first().map(String::as_str) == Some("backends")).then(|| x.get(1).cloned());
            if let (Some(Some(a)), Some(Some(b))) = (backend(m), backend(t)) {
                if a != b {
                    wrong.push(format!("{} imports {}: no backend imports another", show(m), show(t)));
                }
            }
        }
    }
    wrong
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let found: Vec<String> = workspace().iter().flat_map(cycles).collect();
    assert!(found.is_empty(), "import cycles between files (move what both need below them):\n{}", found.join("\n"));
}

#[test]
fn imports_in_barrier_point_down_and_no_backend_imports_another() {
    let barrier = workspace().into_iter().find(|c| c.name == "barrier (lib.rs)").expect("crates/barrier");
    let wrong = layer_faults(&barrier);
    assert!(wrong.is_empty(), "imports against the layers:\n{}", wrong.join("\n"));
}

/// Every file under `dir` whose extension is one of `exts`.
fn sources(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, exts, out);
        } else if p.extension().is_some_and(|x| exts.iter().any(|e| x == *e)) {
            out.push(p);
        }
    }
}

/// The house's limit on a source file: one that grows past it holds more than one idea.
const MAX_LINES: usize = 700;

/// No source file of a crate (Rust or the components' C) is longer than [`MAX_LINES`] (issue 48).
#[test]
fn no_source_file_in_the_crates_is_over_the_limit() {
    let mut all = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crates"), &["rs", "c", "h"], &mut all);
    assert!(all.len() > 100, "the crates' sources were not found");
    let long: Vec<String> = all
        .iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "target"))
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{}: {n} lines", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines (split by idea):\n{}", long.join("\n"));
}

/// The core names no setting of a layer above it (issue 48 item 2): barrier-mpi and
/// barrier-openshmem declare theirs and register them (`registry::register_layer`).
#[test]
fn the_core_names_no_setting_of_a_layer_above_it() {
    let mut all = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/barrier/src"), &["rs"], &mut all);
    assert!(all.len() > 20, "the core's sources were not found");
    let mut found = Vec::new();
    for path in all {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if ["BARRIER_MPI_", "BARRIER_SHMEM_"].iter().any(|upper| line.contains(upper)) {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the core names an upper layer's setting (declare it there):\n{}", found.join("\n"));
}

/// A small crate in memory, to plant what the checks must find.
fn planted(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> =
        files.iter().map(|(p, t)| (Path::new("/planted").join(p), t.to_string())).collect();
    Crate::read("planted", Path::new("/planted/lib.rs"), &|p: &Path| files.get(p).cloned())
}

fn m(s: &str) -> Module {
    s.split('/').map(String::from).collect()
}

#[test]
fn the_reader_sees_what_it_must() {
    // The real tree: a known import, a `super::` path, a folder's re-export, tests left out.
    let barrier = workspace().into_iter().find(|c| c.name == "barrier (lib.rs)").expect("crates/barrier");
    let graph = barrier.imports();
    let of = |s: &str| graph.get(&m(s)).unwrap_or_else(|| panic!("{s} was read"));
    assert!(of("backends/hierarchical/roots").contains(&m("algo/dissemination")));
    assert!(of("comm/create").contains(&m("comm/composed")), "super:: paths resolve");
    assert!(of("wait").contains(&m("wait/flag")), "a folder's re-exports are read");
    assert!(of("comm/communicator").contains(&m("wait/flag")), "re-exports are followed to the definer");
    assert!(!graph.contains_key(&m("wait/tests")), "unit tests are left out");

    // Planted: every way of writing an import that the rules must see.
    let base = [
        ("lib.rs", "pub mod backends; pub mod registry; pub mod low; pub use registry::backends; pub use low::Thing;"),
        ("registry.rs", "pub fn backends() {}"),
        ("low.rs", "pub struct Thing; pub struct Other;"),
        ("backends/mod.rs", "pub mod one; pub mod two;"),
        ("backends/one.rs", "pub struct Z; pub fn g() {}"),
    ];
    let with = |two: &str| {
        let mut files = base.to_vec();
        files.push(("backends/two.rs", two));
        let krate = planted(&files);
        let graph = krate.imports();
        graph[&m("backends/two")].clone()
    };
    let one = m("backends/one");
    assert!(with("use crate::{low::{Other}, backends::one::Z};").contains(&one), "nested braces");
    assert!(with("use crate::backends; fn f() { backends::one::g(); }").contains(&one), "a module alias");
    assert!(with("use super::one;").contains(&one), "super");
    assert!(with("mod inner { use super::super::one::Z; }").contains(&one), "super from an inline module");
    assert!(with("fn f() { use crate::backends::one::g; g(); }").contains(&one), "a use inside a function");
    assert!(with("fn f() { crate::backends::one::g(); }").contains(&one), "a path in code");
    assert!(with("use crate::Thing;").contains(&m("low")), "a root re-export");
    assert!(with("fn f() { crate::backends(); }").contains(&m("registry")), "a function named like a module");
    assert!(!with("#[cfg(all(test, not(loom)))] mod tests { use crate::low::Other; } fn f() {}").contains(&m("low")));
    assert!(!with(r#"fn f() -> &'static str { "crate::low::Other" }"#).contains(&m("low")), "strings are not code");
    assert!(with("#[cfg(test)] mod tests {} use crate::low::Other;").contains(&m("low")), "code after tests");

    assert!(with("fn f() { use crate::backends; backends::one::g(); }").contains(&one), "an alias in a function");
    assert!(with(r#"fn f() -> String { format!("{:?}", crate::backends::one::g()) }"#).contains(&one), "a macro");
    assert!(with("fn f() { let _ = vec![crate::backends::one::Z]; }").contains(&one), "vec!");
    assert!(!with("fn f() { #[cfg(test)] let _x = crate::low::Other; }").contains(&m("low")), "a cfg(test) statement");
    assert!(!with("fn f(one: u8) -> u8 { one }").contains(&one), "a local named like a module");
    // A function re-exported under its own module's name, and a glob re-export.
    let krate = planted(&[
        ("lib.rs", "pub mod backends; pub mod m;"),
        ("m/mod.rs", "pub mod c; pub use c::c;"),
        ("m/c.rs", "pub fn c() {} pub struct C;"),
        ("backends/mod.rs", "pub mod one; pub mod two; pub use one::*;"),
        ("backends/one.rs", "pub struct Z;"),
        ("backends/two.rs", "use super::Z; fn f() { let _ = crate::m::c::C; }"),
    ]);
    let graph = krate.imports();
    assert!(graph[&m("backends/two")].contains(&m("m/c")), "a module beside a function of its name");
    assert!(graph[&m("backends/two")].contains(&one), "a name through a glob re-export");

    // And the checks fail on them.
    let mut files = base.to_vec();
    files.push(("backends/two.rs", "use crate::backends::one::Z;"));
    files[3] = ("backends/mod.rs", "pub mod one; pub mod two; pub struct Shared;");
    files[4] = ("backends/one.rs", "use super::two::*; pub struct Z;");
    let krate = planted(&files);
    assert!(!cycles(&krate).is_empty(), "a planted cycle is found");
    let faults = layer_faults(&krate);
    assert!(faults.iter().any(|f| f.contains("no backend imports another")), "{faults:?}");
}
