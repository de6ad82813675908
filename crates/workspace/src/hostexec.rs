//! Tool configurations that make a program run on the host: files the
//! person's own tools (agents, editors, build tools, version control,
//! shells) read when they next start in the project, and that name a
//! command, a hook, a wrapper, a download or an environment for them to
//! run. A change to one is flagged `host-exec`: the diff shows its text,
//! but a reviewer must know that this text is a command line for the host,
//! not data of the project.
//!
//! The table is the rule: one row per path with the reason it runs on the
//! host, so that a reviewer reads it as prose. Programs themselves
//! (Makefiles, `build.rs`, test files, scripts) are not here: they are the
//! project's code, shown in full by the diff, and the threat model's
//! known limit says so. What is here is configuration that turns into a
//! command without looking like one, and configuration that is code: a
//! tool's settings written as a program (`eslint.config.js`,
//! `conftest.py`), which the tool runs as the owner when an editor opens
//! the folder, lints or formats a file, or lists the tests. Settings files
//! that can name code to load (`.pylintrc`'s `init-hook`, `pyproject.toml`)
//! are judged by what they name: `crate::loads`.

use std::path::{Component, Path, PathBuf};

/// Paths a tool on the host runs something from, and why. A pattern ending
/// in `/` covers everything below that directory; one holding `*` is a
/// glob over as many trailing path components as it has (`*` does not
/// cross `/`); otherwise it names one path. Every row holds at any depth:
/// a nested project, a submodule, a folder opened on its own in an editor
/// are each a top for their tools.
pub(crate) const TOOLS: &[(&str, &str)] = &[
    // Agents and editors: opened in the project, they run what these name.
    (".claude/", "Claude Code runs the hook commands and MCP servers its settings here name when it starts in the project"),
    (".mcp.json", "MCP clients start the servers this names (a command line) when they open the project"),
    (".cursor/", "Cursor starts the MCP servers and runs the hooks configured here"),
    (".gemini/", "Gemini CLI starts the MCP servers and tool commands its settings here name"),
    (".codex/", "Codex starts the MCP servers its configuration here names"),
    (".zed/", "Zed runs tasks and language servers configured here"),
    (".helix/", "Helix starts the language servers its languages.toml here names"),
    (".vscode/", "editors run tasks (runOn: folderOpen) and apply settings from here"),
    ("*.code-workspace", "VS Code runs a workspace file's tasks (runOn: folderOpen) and applies its settings"),
    (".idea/", "the IDE runs configurations and startup tasks from here"),
    (".devcontainer/", "dev container definitions choose images and commands run on the host (initializeCommand)"),
    (".devcontainer.json", "dev container definitions choose images and commands run on the host (initializeCommand)"),
    (".nvim.lua", "Neovim with 'exrc' runs it when started in the directory"),
    (".nvimrc", "Neovim with 'exrc' runs it when started in the directory"),
    (".exrc", "Vim with 'exrc' runs it when started in the directory"),
    (".gdbinit", "gdb runs its commands when started in the directory (where auto-load allows)"),
    (".lldbinit", "lldb runs its commands when started in the directory (where allowed)"),
    (".pdbrc", "pdb runs its commands when a debugger starts in the directory"),
    (".pdbrc.py", "pdb++ runs this Python when a debugger starts in the directory"),
    (".vimrc", "Vim with 'exrc' runs it when started in the directory"),
    (".gvimrc", "gVim with 'exrc' runs it when started in the directory"),
    // Interpreters' start-up files, read from the current directory.
    (".Rprofile", "R runs it at every start in the directory (R_PROFILE_USER's default)"),
    (".irbrc", "irb (and rails console) runs it when started in the directory"),
    (".pryrc", "pry runs it when started in the directory"),
    (".ghci", "GHCi runs its commands (:! shell commands, :def macros) when started in the directory"),
    // Shells entering the directory.
    (".envrc", "direnv runs it when a shell enters the directory"),
    (".env", "direnv's dotenv (and docker compose, bun, dotenv loaders) put it in the environment of the owner's commands: GIT_CONFIG_*, NODE_OPTIONS, PATH"),
    (".env.*", "dotenv loaders put it in the environment of the owner's commands: GIT_CONFIG_*, NODE_OPTIONS, PATH"),
    ("mise*.toml", "mise runs hooks and tasks from here when a shell enters the directory"),
    (".mise*.toml", "mise runs hooks and tasks from here when a shell enters the directory"),
    (".mise/", "mise runs hooks and tasks from here when a shell enters the directory"),
    (".config/mise/", "mise runs hooks and tasks from here when a shell enters the directory"),
    (".config/mise.toml", "mise runs hooks and tasks from here when a shell enters the directory"),
    // Git hook managers.
    (".pre-commit-config.yaml", "pre-commit runs these hooks on the host at the next commit"),
    (".husky/", "husky makes these git hooks at the next npm install, and its hooks run them"),
    (".huskyrc*", "husky (v4) runs the hook commands named here at the next commit"),
    ("lefthook.yml", "lefthook runs the commands it names as git hooks"),
    (".lefthook.yml", "lefthook runs the commands it names as git hooks"),
    ("lefthook-local.yml", "lefthook runs the commands it names as git hooks"),
    (".lefthook/", "lefthook runs these scripts as git hooks"),
    (".lintstagedrc*", "lint-staged runs these commands at the next commit"),
    ("lint-staged.config.*", "lint-staged runs these commands at the next commit"),
    (".simple-git-hooks*", "simple-git-hooks writes these commands into git hooks"),
    ("simple-git-hooks.*", "simple-git-hooks writes these commands into git hooks"),
    // Node.
    (".npmrc", "npm takes its script shell, node options and registries from here"),
    (".yarnrc.yml", "yarn runs the program its yarnPath names, and takes plugins from here"),
    (".yarnrc", "yarn runs the program its yarn-path names"),
    (".yarn/releases/", "yarn runs the release kept here at every yarn command"),
    (".yarn/plugins/", "yarn loads the plugins kept here at every yarn command"),
    (".pnpmfile.cjs", "pnpm runs it at every pnpm install"),
    ("bunfig.toml", "bun runs the scripts its preload names at every bun run and bun test, and takes its registries from here"),
    ("binding.gyp", "npm runs node-gyp rebuild at install when a package holds one, and gyp runs its <!(...) commands"),
    // Configurations that are code: the tool runs the file itself, as the
    // owner, when an editor opens the folder, lints or formats a file or
    // lists the tests, and at the tool's every run. (Their data forms,
    // `.eslintrc.json` or `.pylintrc`, are flagged when what they name
    // for the tool to load changed: `crate::loads`.)
    ("eslint.config.*", "ESLint runs this JavaScript whenever it lints: an editor's ESLint extension as soon as a file of the project is opened"),
    (".eslintrc.*js", "ESLint runs this JavaScript whenever it lints: an editor's ESLint extension as soon as a file of the project is opened"),
    ("prettier.config.*", "Prettier runs this JavaScript whenever it formats: an editor's Prettier extension at the next format on save"),
    (".prettierrc.*js", "Prettier runs this JavaScript whenever it formats: an editor's Prettier extension at the next format on save"),
    (".prettierrc.*ts", "Prettier runs this TypeScript whenever it formats: an editor's Prettier extension at the next format on save"),
    ("stylelint.config.*", "stylelint runs this JavaScript whenever it lints: an editor's stylelint extension as soon as a stylesheet is opened"),
    (".stylelintrc.*js", "stylelint runs this JavaScript whenever it lints: an editor's stylelint extension as soon as a stylesheet is opened"),
    ("babel.config.*", "Babel runs this whenever it compiles: a linter's Babel parser in the editor, a test runner, a bundler"),
    (".babelrc.*js", "Babel runs this whenever it compiles: a linter's Babel parser in the editor, a test runner, a bundler"),
    ("jest.config.*", "Jest runs this at every run, and an editor's Jest extension when the folder is opened"),
    ("vitest.config.*", "Vitest runs this at every run, and its editor extension when the folder is opened"),
    ("vitest.workspace.*", "Vitest runs this at every run, and its editor extension when the folder is opened"),
    ("vite.config.*", "Vite runs this at every dev server and build, and Vitest (with its editor extension) reads it"),
    ("tailwind.config.*", "the Tailwind CSS editor extension runs this when the folder is opened, and every build runs it"),
    ("postcss.config.*", "PostCSS runs this at every build, and editor extensions that read it when the folder is opened"),
    (".postcssrc.*js", "PostCSS runs this at every build, and editor extensions that read it when the folder is opened"),
    (".postcssrc.*ts", "PostCSS runs this at every build, and editor extensions that read it when the folder is opened"),
    ("svelte.config.*", "the Svelte language server runs this when the folder is opened, and every build runs it"),
    ("astro.config.*", "Astro's language server and every build run this"),
    ("playwright.config.*", "Playwright runs this at every run, and its editor extension when the folder is opened, to list the tests"),
    ("cypress.config.*", "Cypress runs this at every run"),
    ("webpack.config.*", "webpack runs this at every build and dev server"),
    ("rollup.config.*", "rollup runs this at every build"),
    ("next.config.*", "Next.js runs this at every dev server and build"),
    ("nuxt.config.*", "Nuxt runs this at every dev server and build"),
    ("tsup.config.*", "tsup runs this at every build"),
    (".mocharc.*js", "Mocha runs this at every run, an editor's test explorer included"),
    ("commitlint.config.*", "commitlint runs this at the next commit, from a git hook"),
    (".markdownlint*.*js", "markdownlint's editor extension runs this when a Markdown file is opened"),
    ("conftest.py", "pytest imports it at every run below its directory, editors' test discovery (when the folder is opened) included"),
    ("sitecustomize.py", "Python imports it at every start of an interpreter that has its directory on the path"),
    ("usercustomize.py", "Python imports it at every start of an interpreter that has its directory on the path"),
    (".rspec", "rspec takes its command line from it at every run (a require option in it loads Ruby)"),
    (".rspec-local", "rspec takes its command line from it at every run (a require option in it loads Ruby)"),
    (".php-cs-fixer*.php", "PHP CS Fixer runs this PHP whenever it formats: an editor extension at the next format on save"),
    (".php_cs", "PHP CS Fixer runs this PHP whenever it formats: an editor extension at the next format on save"),
    (".php_cs.dist", "PHP CS Fixer runs this PHP whenever it formats: an editor extension at the next format on save"),
    ("rust-analyzer.toml", "rust-analyzer runs the commands named here (build script and check overrides, a proc-macro server) when the folder is opened"),
    (".dir-locals.el", "Emacs applies it to every file opened below it, and runs its eval forms once they are marked safe"),
    (".dir-locals-2.el", "Emacs applies it to every file opened below it, and runs its eval forms once they are marked safe"),
    // Rust.
    (".cargo/config.toml", "cargo runs the rustc-wrapper, linker and runner named here, and sets the environment (LD_PRELOAD) of every build"),
    (".cargo/config", "cargo runs the rustc-wrapper, linker and runner named here, and sets the environment (LD_PRELOAD) of every build"),
    ("rust-toolchain.toml", "rustup runs the toolchain it names (a path) for every cargo and rustc in the directory"),
    ("rust-toolchain", "rustup runs the toolchain it names (a path) for every cargo and rustc in the directory"),
    // JVM and Bazel: wrappers that download and run another program.
    ("gradle/wrapper/gradle-wrapper.properties", "the gradle wrapper downloads and runs the distribution its distributionUrl names"),
    ("gradle.properties", "gradle starts its daemon with the JVM options named here (org.gradle.jvmargs: a -javaagent)"),
    (".mvn/", "maven takes its JVM options, extensions and its wrapper's download (distributionUrl) from here"),
    (".bazeliskrc", "bazelisk downloads and runs the bazel its BAZELISK_BASE_URL names"),
    (".bazelrc", "bazel takes startup options (host JVM arguments, tool paths) from here"),
    // .NET: MSBuild and the dotnet muxer read these from the directory up.
    ("Directory.Build.props", "MSBuild imports it into every project below it, and its targets run commands (Exec) at every build"),
    ("Directory.Build.targets", "MSBuild imports it into every project below it, and its targets run commands (Exec) at every build"),
    ("global.json", "the dotnet muxer runs the SDK it selects, from the paths its sdk.paths names"),
    // Ruby.
    (".bundle/config", "Bundler takes the Gemfile it loads (BUNDLE_GEMFILE, Ruby code), its paths and build options from here"),
    // Python: a .pth line starting with `import` runs at every start of
    // the interpreter whose site-packages holds it.
    ("*.pth", "Python runs its import lines at every start of an interpreter whose site-packages holds it"),
    // Other version control.
    (".hg/hgrc", "Mercurial runs the [hooks] and extensions named here at the next hg command"),
    (".jj/repo/config.toml", "Jujutsu runs the editor, pager, diff and merge tools named here"),
];

/// The reasons of every row of [`TOOLS`] that `path` matches.
pub(crate) fn reasons(path: &Path) -> impl Iterator<Item = &'static str> {
    // Each directory's view of the path, made once for every row.
    let tails = tails(path);
    TOOLS
        .iter()
        .filter(move |(pattern, _)| tails.iter().any(|t| hit(t, pattern)))
        .map(|(_, reason)| *reason)
}

/// `path` as seen from each of its directories (`a/b/c`, `b/c`, `c`).
fn tails(path: &Path) -> Vec<PathBuf> {
    let comps: Vec<Component> = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    (0..comps.len())
        .map(|i| comps[i..].iter().collect())
        .collect()
}

/// Whether `path` (relative to the workspace) is covered by `pattern` in
/// any of its directories.
pub(crate) fn matches(path: &Path, pattern: &str) -> bool {
    tails(path).iter().any(|t| hit(t, pattern))
}

/// Whether a symbolic link at `link` redirects what `pattern` covers: it
/// stands at a directory above the pattern's path (`.github` for
/// `.github/workflows/`, `.yarn` for `.yarn/releases/`), in any of the
/// link's directories. (A link at a path the pattern covers is
/// [`matches`].)
pub(crate) fn above(link: &Path, pattern: &str) -> bool {
    let comps: Vec<Component> = link
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let row = Path::new(pattern.trim_end_matches('/'));
    let depth = row.components().count();
    (0..comps.len()).any(|i| {
        let p: PathBuf = comps[i..].iter().collect();
        p.components().count() < depth && row.starts_with(&p)
    })
}

/// Where a relative link at `link` with text `target` leads, read as
/// text within the workspace (`..` taken lexically); `None` when it is
/// absolute or climbs out (those are `symlink-escape`'s).
pub(crate) fn resolved(link: &Path, target: &Path) -> Option<PathBuf> {
    if target.is_absolute() {
        return None;
    }
    let mut out: Vec<&std::ffi::OsStr> = link
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    for c in target.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop()?;
            }
            _ => {}
        }
    }
    Some(out.iter().collect())
}

/// The reasons of every row a symbolic link at `link` to `target`
/// redirects: a row at or below the link's path, or one its target
/// reaches into or onto. The files behind such a link sit under a name no
/// row covers, so the link is where the review must look.
pub(crate) fn link_reasons<'a>(
    link: &'a Path,
    target: Option<&'a Path>,
) -> impl Iterator<Item = &'static str> + 'a {
    let into = target.and_then(|t| resolved(link, t));
    TOOLS
        .iter()
        .filter(move |(pattern, _)| {
            above(link, pattern) || into.as_deref().is_some_and(|t| matches(t, pattern))
        })
        .map(|(_, reason)| *reason)
}

fn hit(p: &Path, pattern: &str) -> bool {
    if let Some(dir) = pattern.strip_suffix('/') {
        // The directory itself too: made, replaced by a file, or made a
        // link to a directory of unremarkable name, it is what the tool
        // reads.
        return p.starts_with(dir);
    }
    if !pattern.contains('*') {
        return p == Path::new(pattern);
    }
    // A glob over the path's last components, as many as it has.
    let depth = Path::new(pattern).components().count();
    if p.components().count() != depth {
        return false;
    }
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    match globs().iter().find(|(row, _)| *row == pattern) {
        Some((_, g)) => g.matches_path_with(p, opts),
        None => glob::Pattern::new(pattern).is_ok_and(|g| g.matches_path_with(p, opts)),
    }
}

/// The glob rows of [`TOOLS`], compiled once: a review follows every link
/// of the tree and judges where each ends.
fn globs() -> &'static [(&'static str, glob::Pattern)] {
    static GLOBS: std::sync::OnceLock<Vec<(&'static str, glob::Pattern)>> =
        std::sync::OnceLock::new();
    GLOBS.get_or_init(|| {
        TOOLS
            .iter()
            .filter(|(row, _)| row.contains('*'))
            .filter_map(|(row, _)| glob::Pattern::new(row).ok().map(|g| (*row, g)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path the row `pattern` covers, below `dir`.
    fn example(dir: &str, pattern: &str) -> PathBuf {
        let p = PathBuf::from(dir);
        match pattern.strip_suffix('/') {
            Some(d) => p.join(d).join("settings.json"),
            None => p.join(pattern.replace('*', "x")),
        }
    }

    #[test]
    fn every_row_of_the_table_is_flagged_host_exec_at_the_top_and_nested() {
        let rules = crate::flags::Rules::new(None);
        for (pattern, reason) in TOOLS {
            for p in [example("", pattern), example("sub/dir", pattern)] {
                assert!(matches(&p, pattern), "{pattern}: {}", p.display());
                let c = crate::change::Change {
                    path: p.clone(),
                    kind: crate::change::ChangeKind::Modified,
                    from: None,
                    old: Some(file()),
                    new: Some(file()),
                    content: None,
                    flags: Vec::new(),
                    digest: String::new(),
                    ignored: false,
                    copied_up: false,
                };
                let flags = rules.check(&c);
                assert!(
                    flags
                        .iter()
                        .any(|f| f.rule == "host-exec" && f.reason == *reason),
                    "{} is not flagged for {pattern}: {flags:?}",
                    p.display()
                );
            }
        }
    }

    fn file() -> crate::change::Entry {
        crate::change::Entry {
            kind: crate::change::EntryKind::File,
            mode: 0o644,
            size: 1,
            target: None,
        }
    }

    #[test]
    fn globs_stay_within_one_name_and_directories_cover_themselves_and_what_is_below() {
        assert!(matches(
            Path::new("a/b/x.code-workspace"),
            "*.code-workspace"
        ));
        assert!(!matches(Path::new("a/.lintstagedrc/x"), ".lintstagedrc*"));
        assert!(matches(Path::new(".lintstagedrc.json"), ".lintstagedrc*"));
        assert!(matches(Path::new("a/.vscode/tasks.json"), ".vscode/"));
        assert!(matches(Path::new(".vscode"), ".vscode/"));
        assert!(!matches(Path::new(".vscode-old"), ".vscode/"));
        assert!(above(Path::new("sub/.yarn"), ".yarn/releases/"));
        assert!(!above(Path::new(".yarn/releases"), ".yarn/releases/"));
        assert!(!above(Path::new("yarn"), ".yarn/releases/"));
        assert_eq!(
            resolved(Path::new("a/l"), Path::new("../b/./c")),
            Some(PathBuf::from("b/c"))
        );
        assert_eq!(resolved(Path::new("l"), Path::new("../x")), None);
        assert!(!matches(Path::new("src/env.rs"), ".env"));
        assert!(!matches(Path::new("src/x.environment"), ".env.*"));
        assert!(matches(
            Path::new("x/gradle/wrapper/gradle-wrapper.properties"),
            "gradle/wrapper/gradle-wrapper.properties"
        ));
    }
}
