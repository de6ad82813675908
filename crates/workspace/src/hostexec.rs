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
    (".roo/", "Roo Code starts the MCP servers its mcp.json here names and follows the rules here"),
    (".kiro/", "Kiro runs the hooks and starts the MCP servers configured here"),
    (".amazonq/", "Amazon Q starts the MCP servers its mcp.json here names"),
    (".qwen/", "Qwen Code starts the MCP servers and tool commands its settings here name"),
    (".continue/", "Continue starts the MCP servers named here and runs its config.ts"),
    (".opencode/", "opencode starts the MCP servers (local commands) and plugins configured here"),
    ("opencode.json", "opencode starts the MCP servers (local commands) this names when it starts in the project"),
    ("opencode.jsonc", "opencode starts the MCP servers (local commands) this names when it starts in the project"),
    (".windsurf/", "Windsurf runs the workflows and follows the rules kept here"),
    (".cline/", "Cline runs the workflows and follows the rules kept here"),
    ("mcp.json", "MCP clients (Cursor, Kiro, Roo, Amazon Q, VS Code) start the servers this names (a command line)"),
    ("mcp_config.json", "MCP clients start the servers this names (a command line)"),
    (".aider.conf.yml", "aider runs its lint-cmd and test-cmd (auto-lint, auto-test) after every edit when started in the directory"),
    (".vs/", "Visual Studio runs the tasks (tasks.vs.json) and launch settings kept here"),
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
    // (The JavaScript tools' spellings are generated from [`CODE`].)
    ("vitest.workspace.*", "Vitest runs this at every run, and its editor extension when the folder is opened"),
    (".markdownlint*.*js", "markdownlint's editor extension runs this when a Markdown file is opened"),
    ("karma.conf.*", "Karma runs this at every run"),
    ("wdio.conf.*", "WebdriverIO runs this at every run"),
    ("nightwatch.conf.*", "Nightwatch runs this at every run"),
    ("protractor.conf.*", "Protractor runs this at every run"),
    ("gatsby-config.*", "Gatsby runs this at every dev server and build"),
    ("gatsby-node.*", "Gatsby runs this at every dev server and build"),
    (".eleventy.js", "Eleventy runs this at every build and dev server"),
    (".storybook/main.*", "Storybook runs this at every start and build, and its editor extension when the folder is opened"),
    (".vitepress/config.*", "VitePress runs this at every dev server and build"),
    ("jupyter_*_config.py", "Jupyter runs this Python at every start in the directory (its config path begins with the current directory)"),
    ("ipython_config.py", "IPython runs this Python at every start in the directory"),
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
    // Packages the owner's editor loads from the workspace rather than
    // its own copy: running them is what opening or formatting a file does.
    ("node_modules/prettier/", "the editor's Prettier extension loads the workspace's own Prettier at the next format on save"),
    ("node_modules/eslint/", "the editor's ESLint extension loads the workspace's own ESLint as soon as a file of the project is opened"),
    ("node_modules/typescript/", "editors run the workspace's own TypeScript server (tsserver) when it is selected or trusted for the folder"),
    ("node_modules/stylelint/", "the editor's stylelint extension loads the workspace's own stylelint as soon as a stylesheet is opened"),
    ("node_modules/@biomejs/", "the editor's Biome extension runs the workspace's own Biome binary as soon as a file is opened"),
    ("node_modules/.bin/", "editor extensions and npm scripts run the programs linked here"),
    // Interpreters of a project's virtual environment: editors' Python
    // extensions run it when the folder is opened.
    (".venv/bin/", "the editor's Python extension runs the workspace's interpreter (and its activation scripts) when the folder is opened"),
    ("venv/bin/", "the editor's Python extension runs the workspace's interpreter (and its activation scripts) when the folder is opened"),
    (".venv/scripts/", "the editor's Python extension runs the workspace's interpreter when the folder is opened"),
    (".venv/pyvenv.cfg", "Python takes its home (which interpreter and standard library run) from it"),
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

/// Tools whose configuration is a program, run by the tool as the owner
/// when an editor opens the folder, lints or formats a file or lists the
/// tests, and at its every run. Each stem's every spelling is a row (see
/// [`spellings`]): `<stem>.config.*`, and `.<stem>rc` and
/// `.config/<stem>rc` in each code extension. Their data forms
/// (`.eslintrc.json`, `.nycrc`) are flagged when what they name for the
/// tool to load changed: `crate::loads`.
pub(crate) const CODE: &[(&str, &str)] = &[
    ("eslint", "ESLint runs this JavaScript whenever it lints: an editor's ESLint extension as soon as a file of the project is opened"),
    ("prettier", "Prettier runs this JavaScript whenever it formats: an editor's Prettier extension at the next format on save"),
    ("stylelint", "stylelint runs this JavaScript whenever it lints: an editor's stylelint extension as soon as a stylesheet is opened"),
    ("babel", "Babel runs this whenever it compiles: a linter's Babel parser in the editor, a test runner, a bundler"),
    ("postcss", "PostCSS runs this at every build, and editor extensions that read it when the folder is opened"),
    ("tailwind", "the Tailwind CSS editor extension runs this when the folder is opened, and every build runs it"),
    ("svelte", "the Svelte language server runs this when the folder is opened, and every build runs it"),
    ("astro", "Astro's language server and every build run this"),
    ("vue", "Vue CLI and the Vue language tools run this at every dev server and build"),
    ("uno", "UnoCSS's editor extension runs this when the folder is opened, and every build runs it"),
    ("jest", "Jest runs this at every run, and an editor's Jest extension when the folder is opened"),
    ("vitest", "Vitest runs this at every run, and its editor extension when the folder is opened"),
    ("playwright", "Playwright runs this at every run, and its editor extension when the folder is opened, to list the tests"),
    ("cypress", "Cypress runs this at every run"),
    ("mocha", "Mocha runs this at every run, an editor's test explorer included"),
    ("ava", "AVA runs this at every run, an editor's test explorer included"),
    ("nyc", "nyc runs this at every measured test run"),
    ("c8", "c8 runs this at every measured test run"),
    ("vite", "Vite runs this at every dev server and build, and Vitest (with its editor extension) reads it"),
    ("webpack", "webpack runs this at every build and dev server"),
    ("rollup", "rollup runs this at every build"),
    ("rspack", "Rspack runs this at every build and dev server"),
    ("rsbuild", "Rsbuild runs this at every build and dev server"),
    ("tsup", "tsup runs this at every build"),
    ("tsdown", "tsdown runs this at every build"),
    ("next", "Next.js runs this at every dev server and build"),
    ("nuxt", "Nuxt runs this at every dev server and build"),
    ("metro", "Metro (React Native) runs this at every bundler start"),
    ("quasar", "Quasar runs this at every dev server and build"),
    ("docusaurus", "Docusaurus runs this at every dev server and build"),
    ("eleventy", "Eleventy runs this at every build and dev server"),
    ("remix", "Remix runs this at every dev server and build"),
    ("knip", "knip runs this at every run"),
    ("commitlint", "commitlint runs this at the next commit, from a git hook"),
    ("release", "semantic-release runs this at every release"),
    ("ncu", "npm-check-updates runs this at every run"),
    ("ecosystem", "pm2 runs this at every start of the project's processes"),
    ("size-limit", "size-limit runs this at every run"),
    ("syncpack", "syncpack runs this at every run"),
    ("lerna", "Lerna runs this at every run"),
    ("drizzle", "drizzle-kit runs this at every run"),
    ("codegen", "GraphQL Code Generator runs this at every run"),
    ("capacitor", "Capacitor runs this at every sync and build"),
    ("electron-builder", "electron-builder runs this at every build"),
    ("remark", "remark's editor extension runs this when a Markdown file is opened"),
    ("textlint", "textlint's editor extension runs this when a file is opened"),
];

/// The extensions a JavaScript tool loads its configuration from as code.
const CODE_EXTENSIONS: &[&str] = &["js", "cjs", "mjs", "ts", "cts", "mts"];

/// Every spelling of a [`CODE`] stem that its tool runs.
fn spellings(stem: &str) -> Vec<String> {
    let mut out = vec![format!("{stem}.config.*")];
    for ext in CODE_EXTENSIONS {
        out.push(format!(".{stem}rc.{ext}"));
        out.push(format!(".config/{stem}rc.{ext}"));
    }
    out
}

/// A row of [`TOOLS`] or a spelling of [`CODE`], ready to match: in lower
/// case, as names are compared in any case (the owner's file system may
/// fold case: ext4 casefold, vfat, a macOS share, where `ESLINT.CONFIG.JS`
/// is the tool's file).
struct Row {
    /// As written in the table.
    pattern: String,
    lower: String,
    reason: &'static str,
    glob: Option<glob::Pattern>,
    /// Components of a glob row.
    depth: usize,
}

/// Every row, compiled once: a review judges every changed path and
/// follows every link of the tree.
fn rows() -> &'static [Row] {
    static ROWS: std::sync::OnceLock<Vec<Row>> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        let tools = TOOLS.iter().map(|(p, r)| (p.to_string(), *r));
        let code = CODE
            .iter()
            .flat_map(|(stem, r)| spellings(stem).into_iter().map(move |p| (p, *r)));
        tools.chain(code).map(|(p, r)| row(p, r)).collect()
    })
}

fn row(pattern: String, reason: &'static str) -> Row {
    let lower = pattern.to_lowercase();
    let glob = if lower.contains('*') && !lower.ends_with('/') {
        glob::Pattern::new(&lower).ok()
    } else {
        None
    };
    let depth = lower.split('/').count();
    Row {
        pattern,
        lower,
        reason,
        glob,
        depth,
    }
}

/// Every row's pattern as written, the generated spellings included.
pub(crate) fn patterns() -> impl Iterator<Item = &'static str> {
    rows().iter().map(|r| r.pattern.as_str())
}

/// The reasons of every row that `path` matches.
pub(crate) fn reasons(path: &Path) -> impl Iterator<Item = &'static str> {
    // Each directory's view of the path, made once for every row.
    let tails = tails(path);
    rows()
        .iter()
        .filter(move |row| tails.iter().any(|t| hit(t, row)))
        .map(|row| row.reason)
}

/// `path` as seen from each of its directories (`a/b/c`, `b/c`, `c`), in
/// lower case.
fn tails(path: &Path) -> Vec<String> {
    let comps: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().to_lowercase()),
            _ => None,
        })
        .collect();
    (0..comps.len()).map(|i| comps[i..].join("/")).collect()
}

/// Whether `path` (relative to the workspace) is covered by `pattern` in
/// any of its directories.
#[cfg(test)]
pub(crate) fn matches(path: &Path, pattern: &str) -> bool {
    let row = row(pattern.to_string(), "");
    tails(path).iter().any(|t| hit(t, &row))
}

/// Whether a symbolic link at `link` redirects what `pattern` covers: it
/// stands at a directory above the pattern's path (`.github` for
/// `.github/workflows/`, `.yarn` for `.yarn/releases/`), in any of the
/// link's directories. (A link at a path the pattern covers is
/// [`matches`].)
pub(crate) fn above(link: &Path, pattern: &str) -> bool {
    let lower = pattern.trim_end_matches('/').to_lowercase();
    let row = Path::new(&lower);
    let depth = row.components().count();
    tails(link).iter().any(|p| {
        let p = Path::new(p);
        p.components().count() < depth && row.starts_with(p)
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
    let into = into.map(|t| tails(&t)).unwrap_or_default();
    rows()
        .iter()
        .filter(move |row| above(link, &row.pattern) || into.iter().any(|t| hit(t, row)))
        .map(|row| row.reason)
}

/// Whether the row covers `tail` (a lower-case path seen from one of its
/// directories).
fn hit(tail: &str, row: &Row) -> bool {
    if let Some(dir) = row.lower.strip_suffix('/') {
        // The directory itself too: made, replaced by a file, or made a
        // link to a directory of unremarkable name, it is what the tool
        // reads.
        return tail == dir || tail.starts_with(&row.lower);
    }
    let Some(glob) = &row.glob else {
        return tail == row.lower;
    };
    // A glob over the path's last components, as many as it has.
    if tail.split('/').count() != row.depth {
        return false;
    }
    let opts = glob::MatchOptions {
        case_sensitive: false,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    glob.matches_with(tail, opts)
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
        for row in rows() {
            let (pattern, reason) = (&row.pattern, &row.reason);
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
    fn every_spelling_of_a_code_configuration_and_any_case_is_flagged() {
        let flagged = |p: &str| reasons(Path::new(p)).next().is_some();
        for stem in CODE.iter().map(|(stem, _)| stem) {
            for ext in CODE_EXTENSIONS {
                for p in [
                    format!("{stem}.config.{ext}"),
                    format!("a/.{stem}rc.{ext}"),
                    format!(".config/{stem}rc.{ext}"),
                    format!("{stem}.config.{ext}").to_uppercase(),
                ] {
                    assert!(flagged(&p), "{p} is not flagged");
                }
            }
            assert!(
                !flagged(&format!(".{stem}rc")),
                "{stem}'s data form by name"
            );
            assert!(!flagged(&format!("src/{stem}.js")), "{stem}'s module");
        }
        for p in [
            "ESLINT.CONFIG.JS",
            "Conftest.py",
            ".VSCode/tasks.json",
            "x/.Claude/settings.json",
            "Node_Modules/Prettier/index.js",
            ".venv/bin/python",
            "jupyter_server_config.py",
            ".kiro/hooks/x",
        ] {
            assert!(flagged(p), "{p} is not flagged");
        }
        for p in [
            "node_modules/left-pad/index.js",
            "venv/lib/x.py",
            "jupyter.py",
        ] {
            assert!(!flagged(p), "{p} is flagged");
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
