//! Changes the review cannot show as text, judged by what the host will do
//! with them: the rule `binary`.
//!
//! A diff shows a file holding a NUL or a byte that is not UTF-8 as
//! `binary files differ` and nothing else. For an image that is what it
//! is; for a file the host runs it hides the change: node, GNU make, bash
//! past its first line, and Python with a `coding:` line all run such a
//! file, so one NUL in a trailing comment (or one Latin-1 byte) would let
//! a payload land without a line of it shown. So a binary change is
//! flagged when any of these says it is code or text:
//! - its name: compiled code the host loads or runs ([`COMPILED`], by
//!   name alone whenever its content was not shown as text, read or
//!   not: a forged `__pycache__/*.pyc` runs in place of the unchanged
//!   `.py` beside it), a source, script or
//!   configuration extension, or a build file ([`SOURCE`], [`BUILD_FILES`]);
//! - its content: a `#!` first line, or no NUL at all (text in an
//!   encoding other than UTF-8, which the review does not decode);
//! - its past: the host's file was text and the sandbox's is not.
//!
//! - and otherwise, unless its name says it is an asset the host never
//!   runs ([`ASSETS`]: images, fonts, audio, video, PDFs, archives): an
//!   allow list, since a list of what runs always lags, and a file
//!   `config` with one NUL is what node loads in place of `config.js`.
//!
//! Binary assets of an ordinary project stay unflagged: their content was
//! never a review's to read.
//! Executables are flagged by `flags` already (`executable`), and files
//! too large to read as text by `not-shown`.

use crate::beneath::Tree;
use crate::change::{Change, ChangeKind, Content, EntryKind, Flag, TEXT_DIFF_LIMIT};
use std::io::Read;
use std::path::Path;

/// The rule's name.
pub(crate) const BINARY: &str = "binary";

/// Compiled code the host runs or loads, by a pattern on its last path
/// component (or a directory anywhere in its path, ending in `/`), and
/// why: flagged unless the review showed its content as text.
pub(crate) const COMPILED: &[(&str, &str)] = &[
    ("__pycache__/", "Python runs a cached .pyc in place of the source beside it when its header matches that source's mtime and size, which the sandbox can read"),
    ("*.pyc", "Python runs compiled bytecode in place of its source"),
    ("*.pyo", "Python runs compiled bytecode in place of its source"),
    ("*.class", "the JVM runs compiled classes found on the class path"),
    ("*.jar", "the JVM runs the classes of a jar (the gradle wrapper's gradle-wrapper.jar at every ./gradlew)"),
    ("*.so", "a shared library is loaded into the host's programs (LD_PRELOAD from .cargo/config.toml or .env, Python extension modules)"),
    ("*.so.*", "a shared library is loaded into the host's programs"),
    ("*.dylib", "a shared library is loaded into the host's programs"),
    ("*.node", "node loads native addons into its own process"),
    ("*.wasm", "WebAssembly modules run in the host's node, browsers and tools"),
    ("*.o", "object files are linked into the host's builds"),
    ("*.a", "static libraries are linked into the host's builds"),
    ("*.exe", "a program for the host"),
    ("*.dll", "a library for the host's programs"),
    ("*.pyz", "Python runs a zip application as a program (python x.pyz, or by its #! line)"),
    ("*.phar", "PHP runs a phar archive as a program (composer.phar)"),
    ("*.elc", "Emacs loads compiled Lisp in place of the .el beside it"),
    ("*.beam", "the Erlang VM loads compiled modules found on its code path (Elixir, Erlang, Gleam)"),
];

/// Extensions of binary assets the host's tools only display, play or
/// unpack when asked, never run: a binary change to one stays unflagged.
/// Every other binary change is flagged, whatever its name: the list of
/// what runs would always lag (a `config` with one NUL is what node's
/// `require("./config")` loads before the reviewed `config.js`).
const ASSETS: &[&str] = &[
    // Images.
    "png", "jpg", "jpeg", "gif", "webp", "bmp", "ico", "icns", "tif", "tiff", "avif", "heic", "psd",
    "xcf", // Fonts.
    "woff", "woff2", "ttf", "otf", "eot", // Audio and video.
    "mp3", "wav", "ogg", "oga", "flac", "m4a", "aac", "opus", "mp4", "m4v", "webm", "mov", "avi",
    "mkv", // Documents.
    "pdf",
    // Archives: data the host unpacks when asked, never runs unasked
    // (the runnable kinds, jar, pyz, phar, are compiled code above).
    "zip", "gz", "tgz", "bz2", "xz", "zst", "7z", "tar", "rar",
];

/// Extensions of files that are text by nature, and the kind of file they
/// say it is: a version the review cannot show as text hides code.
const SOURCE: &[(&str, &str)] = &[
    ("js", "JavaScript"),
    ("mjs", "JavaScript"),
    ("cjs", "JavaScript"),
    ("jsx", "JavaScript"),
    ("ts", "TypeScript"),
    ("mts", "TypeScript"),
    ("cts", "TypeScript"),
    ("tsx", "TypeScript"),
    ("py", "Python"),
    ("pyw", "Python"),
    ("pyi", "Python"),
    ("sh", "shell"),
    ("bash", "shell"),
    ("zsh", "shell"),
    ("fish", "shell"),
    ("ksh", "shell"),
    ("rb", "Ruby"),
    ("pl", "Perl"),
    ("pm", "Perl"),
    ("php", "PHP"),
    ("lua", "Lua"),
    ("tcl", "Tcl"),
    ("r", "R"),
    ("jl", "Julia"),
    ("ps1", "PowerShell"),
    ("bat", "batch"),
    ("cmd", "batch"),
    ("vbs", "VBScript"),
    ("rs", "Rust"),
    ("go", "Go"),
    ("c", "C"),
    ("h", "C"),
    ("cc", "C++"),
    ("cpp", "C++"),
    ("cxx", "C++"),
    ("hpp", "C++"),
    ("m", "Objective-C"),
    ("swift", "Swift"),
    ("java", "Java"),
    ("kt", "Kotlin"),
    ("kts", "Kotlin"),
    ("scala", "Scala"),
    ("groovy", "Groovy"),
    ("gradle", "Gradle"),
    ("cs", "C#"),
    ("fs", "F#"),
    ("ex", "Elixir"),
    ("exs", "Elixir"),
    ("erl", "Erlang"),
    ("hs", "Haskell"),
    ("ml", "OCaml"),
    ("clj", "Clojure"),
    ("dart", "Dart"),
    ("zig", "Zig"),
    ("nim", "Nim"),
    ("vim", "Vim script"),
    ("el", "Emacs Lisp"),
    ("awk", "awk"),
    ("sed", "sed"),
    ("mk", "make"),
    ("cmake", "CMake"),
    ("nix", "Nix"),
    ("bzl", "Starlark"),
    ("bazel", "Starlark"),
    ("rake", "Ruby"),
    ("gemspec", "Ruby"),
    ("sbt", "sbt"),
    ("json", "configuration"),
    ("jsonc", "configuration"),
    ("json5", "configuration"),
    ("toml", "configuration"),
    ("yaml", "configuration"),
    ("yml", "configuration"),
    ("ini", "configuration"),
    ("cfg", "configuration"),
    ("conf", "configuration"),
    ("properties", "configuration"),
    ("xml", "configuration"),
    ("env", "configuration"),
    ("html", "HTML"),
    ("htm", "HTML"),
    ("svg", "SVG"),
    ("vue", "Vue"),
    ("svelte", "Svelte"),
    ("sql", "SQL"),
    ("tf", "Terraform"),
    ("hcl", "configuration"),
    ("dockerfile", "Dockerfile"),
    ("md", "text"),
    ("txt", "text"),
    ("rst", "text"),
    ("csv", "text"),
];

/// Build files, by name, that tools on the host run.
const BUILD_FILES: &[&str] = &[
    "Makefile",
    "makefile",
    "GNUmakefile",
    "Dockerfile",
    "Containerfile",
    "Rakefile",
    "Gemfile",
    "Justfile",
    "justfile",
    "Taskfile",
    "CMakeLists.txt",
    "meson.build",
    "SConstruct",
    "SConscript",
    "BUILD",
    "WORKSPACE",
    "BUILD.bazel",
    "MODULE.bazel",
    "WORKSPACE.bazel",
    "Vagrantfile",
    "Jenkinsfile",
    "Procfile",
    "Brewfile",
    "Podfile",
    "Fastfile",
    "Earthfile",
    "Tiltfile",
    "PKGBUILD",
    "gradlew",
    "mvnw",
    "configure",
];

/// The `binary` flag of change `c`, if it earns one. `real` is the real
/// workspace and `layer` the sandbox's, both as the diff opened them.
pub(crate) fn flag(real: &Tree, layer: &Tree, c: &Change) -> Option<Flag> {
    let new = c.new.as_ref().filter(|n| n.kind == EntryKind::File)?;
    if c.kind == ChangeKind::Mode {
        return None;
    }
    let shown_as_text = matches!(c.content, Some(Content::Text { .. }));
    if let Some(why) = compiled(&c.path).filter(|_| !shown_as_text) {
        return Some(binary(format!(
            "compiled code, never shown by a review: {why}; keep it out unless you built it yourself"
        )));
    }
    let Some(Content::Binary { old_size, new_size }) = &c.content else {
        return None;
    };
    if (*old_size).max(*new_size) > TEXT_DIFF_LIMIT {
        // Flagged `not-shown` already: its content was not read.
        return None;
    }
    let shown_as = "the review shows only `binary files differ`, none of its content";
    if let Some(kind) = named_source(&c.path) {
        return Some(binary(format!(
            "a {kind} file that holds a NUL or bytes that are not UTF-8: {shown_as}, yet the host's tools read and run it as text"
        )));
    }
    // What the content says: read beneath the trees' descriptors, no
    // further than the sizes the walk recorded. A side that cannot be read
    // now is judged as the worst it could be.
    let bytes = |tree: &Tree, rel: &Path, size: u64| -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        tree.file(rel).ok()?.take(size).read_to_end(&mut buf).ok()?;
        Some(buf)
    };
    let Some(b) = bytes(layer, &c.path, new.size) else {
        return Some(binary(format!(
            "{shown_as}, and warden could not read it again to judge it"
        )));
    };
    if b.starts_with(b"#!") {
        return Some(binary(format!(
            "a script (its first line is #!) that holds a NUL or bytes that are not UTF-8: {shown_as}"
        )));
    }
    if !b.contains(&0) {
        return Some(binary(format!(
            "text in an encoding other than UTF-8 (Latin-1, say, which Python reads with a coding: line): {shown_as}"
        )));
    }
    let old = c.old.as_ref().filter(|o| o.kind == EntryKind::File);
    if let Some(old) = old {
        let from = c.from.as_deref().unwrap_or(&c.path);
        let was_text = bytes(real, from, old.size).is_none_or(|a| is_text(&a));
        if was_text {
            return Some(binary(format!(
                "the host's file is text and the sandbox's is not (a NUL or a byte that is not UTF-8 was added): {shown_as}"
            )));
        }
    }
    if asset(&c.path) {
        return None;
    }
    Some(binary(format!(
        "not an image, font, audio, video, PDF or archive, the kinds the host never runs: {shown_as}, yet its name may be one the host loads (node's require(\"./config\") takes a file `config` before config.js)"
    )))
}

/// Whether `c` is a binary change whose content was read and which only
/// its asset's name leaves unflagged: the names symbolic links give it
/// must be judged too ([`renamed`]).
pub(crate) fn asset_by_name(c: &Change) -> bool {
    let read = matches!(
        &c.content,
        Some(Content::Binary { old_size, new_size }) if (*old_size).max(*new_size) <= TEXT_DIFF_LIMIT
    );
    read && c.kind != ChangeKind::Mode
        && c.new.as_ref().is_some_and(|n| n.kind == EntryKind::File)
        && asset(&c.path)
}

/// The `binary` flag of an asset-named binary change that symbolic links
/// reach under `names` (their own paths, every link of a chain followed):
/// a link `config -> logo.png` is what node's `require("./config")`
/// loads, so the file is judged by every name it has.
pub(crate) fn renamed(names: &[std::path::PathBuf]) -> Option<Flag> {
    let other = names.iter().find(|n| !asset(n))?;
    Some(binary(format!(
        "an asset by its own name, but the symbolic link {} gives it a name the host may load and run (node's require(\"./config\") follows a link `config` to it): the review shows only `binary files differ`, none of its content",
        crate::printable_path(other)
    )))
}

/// Whether the name of `path` says it is an asset the host never runs.
fn asset(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ASSETS.contains(&e.to_ascii_lowercase().as_str()))
}

fn binary(reason: String) -> Flag {
    Flag {
        rule: BINARY,
        reason,
        findings: Vec::new(),
    }
}

fn is_text(v: &[u8]) -> bool {
    !v.contains(&0) && std::str::from_utf8(v).is_ok()
}

/// Why the file at `path` is compiled code the host runs, if it is.
pub(crate) fn compiled(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_str().unwrap_or("");
    let opts = glob::MatchOptions {
        case_sensitive: false,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    COMPILED.iter().find_map(|(pattern, why)| {
        let hit = match pattern.strip_suffix('/') {
            Some(dir) => path
                .parent()
                .is_some_and(|p| p.components().any(|c| c.as_os_str() == dir)),
            None => glob::Pattern::new(pattern).is_ok_and(|g| g.matches_with(name, opts)),
        };
        hit.then_some(*why)
    })
}

/// The kind of source, script or configuration file the name of `path`
/// says it is, if it says one.
fn named_source(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_str()?;
    if BUILD_FILES.contains(&name) || name.starts_with("Dockerfile.") {
        return Some("build");
    }
    let ext = Path::new(name).extension()?.to_str()?.to_ascii_lowercase();
    SOURCE
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_known_by_their_extension_and_extensionless_files_are_not_assets() {
        for p in ["logo.PNG", "f.woff2", "a.tar.gz", "d/guide.pdf", "v.mp4"] {
            assert!(asset(Path::new(p)), "{p}");
        }
        for p in ["config", "data.bin", "x.sqlite", "pkg.whl", "png"] {
            assert!(!asset(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn compiled_code_is_known_by_its_name_and_assets_are_not() {
        for p in [
            "__pycache__/app.cpython-311.pyc",
            "pkg/__pycache__/mod.cpython-312.opt-1.pyc",
            "old/app.pyc",
            "build/classes/Main.class",
            "tools/lib.so",
            "tools/libx.so.1",
            "gradle/wrapper/gradle-wrapper.jar",
            "addon/build/Release/x.node",
            "tool.pyz",
            "composer.phar",
            "init.elc",
            "ebin/x.beam",
        ] {
            assert!(compiled(Path::new(p)).is_some(), "{p}");
        }
        for p in [
            "logo.png",
            "docs/guide.pdf",
            "data/x.sqlite",
            "so/readme",
            "a.social",
        ] {
            assert!(compiled(Path::new(p)).is_none(), "{p}");
        }
    }

    #[test]
    fn source_scripts_configs_and_build_files_are_known_by_their_names() {
        for (p, kind) in [
            ("build.js", "JavaScript"),
            ("Makefile", "build"),
            ("src/app.PY", "Python"),
            ("Dockerfile.dev", "build"),
            (".cargo/config.toml", "configuration"),
            ("lib/tasks/x.rake", "Ruby"),
            ("x.gemspec", "Ruby"),
            ("build.sbt", "sbt"),
            ("BUILD.bazel", "build"),
        ] {
            assert_eq!(named_source(Path::new(p)), Some(kind), "{p}");
        }
        for p in ["logo.png", "font.woff2", "archive.tar.gz", "README"] {
            assert_eq!(named_source(Path::new(p)), None, "{p}");
        }
    }
}
