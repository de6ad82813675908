//! Outside review 33, F1: configurations that the owner's editor, linter,
//! formatter or test runner loads as code (or that name code for it to
//! load) when the folder is opened, a file is linted or formatted, or
//! tests are discovered. The review committed `eslint.config.js`,
//! `prettier.config.js`, `.pylintrc` with `init-hook`, `.rubocop.yml`
//! with `require:` and `conftest.py` unflagged. Every family is written in
//! a real layer over a real workspace and judged by a real diff: a file
//! that is code by its name is flagged whatever it holds; a shared or
//! data-form file only when what it names for a tool to load changed.

use super::ws;
use crate::common::rules;

/// `(path, what the host had, what the sandbox wrote)`: each must be
/// flagged `host-exec`.
const RUN_ON_THE_HOST: &[(&str, Option<&str>, &str)] = &[
    // The review's five.
    ("eslint.config.js", None, "require('child_process').execSync('id > /tmp/pwn-eslint'); module.exports=[]\n"),
    ("prettier.config.js", None, "require('child_process').execSync('id > /tmp/pwn-prettier'); module.exports={}\n"),
    (".pylintrc", None, "[MAIN]\ninit-hook='import os; os.system(\"id > /tmp/pwn-pylint\")'\n"),
    (".rubocop.yml", None, "require:\n- ./evil.rb\n"),
    ("conftest.py", None, "import os\nos.system('id > /tmp/pwn-pytest')\n"),
    // JavaScript configurations that are code, by name, at any depth.
    ("web/eslint.config.mjs", None, "import cp from 'node:child_process'; cp.execSync('id'); export default [];\n"),
    ("eslint.config.ts", None, "export default [];\n"),
    (".eslintrc.cjs", None, "module.exports = {};\n"),
    ("pkg/.eslintrc.js", None, "module.exports = {};\n"),
    (".prettierrc.mjs", None, "export default {};\n"),
    (".prettierrc.cjs", None, "module.exports = {};\n"),
    (".prettierrc.ts", None, "export default {};\n"),
    ("stylelint.config.mjs", None, "export default {};\n"),
    (".stylelintrc.js", None, "module.exports = {};\n"),
    ("babel.config.js", None, "module.exports = {};\n"),
    (".babelrc.cjs", None, "module.exports = {};\n"),
    ("jest.config.ts", None, "export default {};\n"),
    ("vitest.config.mts", None, "export default {};\n"),
    ("vitest.workspace.ts", None, "export default [];\n"),
    ("vite.config.js", None, "export default {};\n"),
    ("tailwind.config.js", None, "module.exports = {};\n"),
    ("postcss.config.cjs", None, "module.exports = {};\n"),
    (".postcssrc.js", None, "module.exports = {};\n"),
    ("svelte.config.js", None, "export default {};\n"),
    ("astro.config.mjs", None, "export default {};\n"),
    ("playwright.config.ts", None, "export default {};\n"),
    ("webpack.config.js", None, "module.exports = {};\n"),
    ("next.config.mjs", None, "export default {};\n"),
    (".mocharc.cjs", None, "module.exports = {};\n"),
    ("commitlint.config.js", None, "module.exports = {};\n"),
    (".markdownlint-cli2.cjs", None, "module.exports = {};\n"),
    // Python, Ruby, PHP, Rust, Emacs: loaded by name.
    ("tests/conftest.py", None, "import os\n"),
    ("sitecustomize.py", None, "import os\n"),
    ("usercustomize.py", None, "import os\n"),
    (".rspec", None, "--require ./spec/evil\n"),
    (".php-cs-fixer.dist.php", None, "<?php system('id'); return new PhpCsFixer\\Config();\n"),
    ("rust-analyzer.toml", None, "[cargo.buildScripts]\noverrideCommand = [\"sh\", \"-c\", \"id\"]\n"),
    (".dir-locals.el", None, "((nil . ((eval . (shell-command \"id\")))))\n"),
    // Shared and data-form files: what they name for a tool to load
    // changed (added, or a line of its value, continuation lines too).
    ("pylintrc", Some("[MAIN]\njobs=2\n"), "[MAIN]\njobs=2\nload-plugins=evil\n"),
    ("setup.cfg", Some("[metadata]\nname = app\n"), "[metadata]\nname = app\n[pylint.MAIN]\ninit-hook = import os; os.system('id')\n"),
    ("tox.ini", Some("[tox]\nenvlist = py3\n[pylint]\nload-plugins =\n    ok\n"), "[tox]\nenvlist = py3\n[pylint]\nload-plugins =\n    ok\n    evil\n"),
    ("pyproject.toml", Some("[project]\nname = \"app\"\n"), "[project]\nname = \"app\"\n[tool.pylint.main]\nload-plugins = [\n\"evil\",\n]\n"),
    ("esc/pyproject.toml", Some("[project]\nname = \"app\"\n"), "[project]\nname = \"app\"\n[tool.pylint.main]\n\"init\\u002Dhook\" = \"import os; os.system('id')\"\n"),
    ("up/pyproject.toml", Some("[project]\nname = \"app\"\n"), "[project]\nname = \"app\"\n[tool.pylint.main]\nINIT_HOOK = \"import os\"\n"),
    ("mypy.ini", None, "[mypy]\nplugins = ./evil.py\n"),
    ("pytest.ini", None, "[pytest]\naddopts = -p evil\n"),
    (".flake8", None, "[flake8:local-plugins]\nextension =\n    X = evil:Plugin\npaths = .\n"),
    (".coveragerc", None, "[run]\nplugins = evil\n"),
    ("app/.rubocop.yml", Some("AllCops:\n  NewCops: enable\n"), "AllCops:\n  NewCops: enable\nplugins: [./evil.rb]\n"),
    ("key/.rubocop.yml", None, "? require\n: [./evil.rb]\n"),
    ("alias/.rubocop.yml", Some("x: &e [./a.rb]\nrequire: *e\n"), "x: &e [./evil.rb]\nrequire: *e\n"),
    (".standard.yml", None, "plugins:\n  - ./evil\n"),
    (".golangci.yml", None, "linters-settings:\n  custom:\n    x:\n      path: ./evil.so\n"),
    (".eslintrc.json", None, "{\n  \"plugins\": [\"./evil\"]\n}\n"),
    (".prettierrc", None, "{\"plugins\": [\"./evil.mjs\"]}\n"),
    ("y/.prettierrc.yaml", Some("semi: false\nplugins:\n  - ok\n"), "semi: false\nplugins:\n  - ok\n  - ./evil.mjs\n"),
    (".stylelintrc.yml", None, "plugins:\n  - ./evil.js\n"),
    (".babelrc", None, "{\"presets\": [\"./evil\"]}\n"),
    (".mocharc.yml", None, "require: ./evil.js\n"),
    (".postcssrc.json", None, "{\"plugins\": {\"./evil.js\": {}}}\n"),
    ("phpstan.neon", None, "parameters:\n  bootstrapFiles:\n    - evil.php\n"),
    // Outside review 34, F2: every spelling of a family (rc files and
    // `.config/` rc files in each code extension), the test runners and
    // build tools beside them, Jupyter, agents' project configurations,
    // what editors load from the workspace, and any case.
    (".commitlintrc.js", None, "module.exports = {};\n"),
    (".commitlintrc.ts", None, "export default {};\n"),
    (".config/prettierrc.mjs", None, "export default {};\n"),
    (".nycrc", None, "{\"require\": [\"./evil.js\"]}\n"),
    (".nycrc.json", None, "{\"require\": [\"./evil.js\"]}\n"),
    ("nyc.config.js", None, "module.exports = {};\n"),
    ("karma.conf.js", None, "module.exports = () => {};\n"),
    ("ava.config.mjs", None, "export default {};\n"),
    ("wdio.conf.ts", None, "export const config = {};\n"),
    ("nightwatch.conf.js", None, "module.exports = {};\n"),
    ("vue.config.js", None, "module.exports = {};\n"),
    ("metro.config.js", None, "module.exports = {};\n"),
    ("gatsby-config.js", None, "module.exports = {};\n"),
    ("quasar.config.js", None, "module.exports = {};\n"),
    ("docusaurus.config.ts", None, "export default {};\n"),
    (".eleventy.js", None, "module.exports = () => {};\n"),
    ("eleventy.config.mjs", None, "export default () => {};\n"),
    ("docs/.vitepress/config.mts", None, "export default {};\n"),
    (".storybook/main.js", None, "module.exports = {};\n"),
    ("uno.config.ts", None, "export default {};\n"),
    ("knip.config.ts", None, "export default {};\n"),
    (".releaserc.js", None, "module.exports = {};\n"),
    (".ncurc.js", None, "module.exports = {};\n"),
    ("ecosystem.config.js", None, "module.exports = {};\n"),
    ("jupyter_server_config.py", None, "c.ServerApp.x = __import__('os').system('id')\n"),
    ("nb/jupyter_notebook_config.py", None, "import os\n"),
    ("jupyter_lab_config.py", None, "import os\n"),
    ("opencode.json", None, "{\"mcp\": {\"x\": {\"type\": \"local\", \"command\": [\"sh\", \"-c\", \"id\"]}}}\n"),
    (".opencode/agent.md", None, "x\n"),
    (".roo/mcp.json", None, "{\"mcpServers\": {\"x\": {\"command\": \"sh\"}}}\n"),
    (".kiro/settings/mcp.json", None, "{\"mcpServers\": {\"x\": {\"command\": \"sh\"}}}\n"),
    (".kiro/hooks/x.kiro.hook", None, "{}\n"),
    (".amazonq/mcp.json", None, "{\"mcpServers\": {\"x\": {\"command\": \"sh\"}}}\n"),
    (".qwen/settings.json", None, "{\"mcpServers\": {\"x\": {\"command\": \"sh\"}}}\n"),
    (".continue/config.ts", None, "export function modifyConfig(c) { return c; }\n"),
    (".continue/mcpServers/x.yaml", None, "mcpServers:\n  - command: sh\n"),
    (".aider.conf.yml", None, "test-cmd: sh -c id\nauto-test: true\n"),
    (".vs/tasks.vs.json", None, "{}\n"),
    ("node_modules/prettier/index.js", None, "require('child_process').execSync('id');\n"),
    ("node_modules/eslint/lib/api.js", None, "module.exports = {};\n"),
    ("node_modules/typescript/lib/tsserver.js", None, "x\n"),
    ("node_modules/stylelint/lib/index.js", None, "x\n"),
    ("web/node_modules/.pnpm/prettier@3.0.0/node_modules/prettier/index.cjs", None, "x\n"),
    (".venv/bin/python", None, "#!/bin/sh\nid\n"),
    ("venv/bin/python3", None, "#!/bin/sh\nid\n"),
    // Names in any case: a case-folding file system reads them as the
    // tool's own.
    ("ESLINT.CONFIG.JS", None, "module.exports = [];\n"),
    ("Conftest.py", None, "import os\n"),
    ("up/Setup.cfg", None, "[tool:pytest]\naddopts = -p evil\n"),
    (".VSCode/tasks.json", None, "{}\n"),
    // The same settings kept in package.json under each tool's key.
    ("eslint/package.json", Some("{\"name\": \"a\"}\n"), "{\"name\": \"a\", \"eslintConfig\": {\"plugins\": [\"./evil\"]}}\n"),
    ("prettier/package.json", None, "{\"name\": \"a\", \"prettier\": \"./evil-config.js\"}\n"),
    ("jest/package.json", Some("{\"jest\": {\"testEnvironment\": \"node\"}}\n"), "{\"jest\": {\"testEnvironment\": \"node\", \"globalSetup\": \"./evil.js\"}}\n"),
];

/// `(path, what the host had, what the sandbox wrote)`: ordinary
/// settings; none is flagged.
const SETTINGS_ONLY: &[(&str, Option<&str>, &str)] = &[
    ("plain/.prettierrc", None, "{\n  \"semi\": false,\n  \"singleQuote\": true\n}\n"),
    ("plain/.eslintrc.json", Some("{\n  \"extends\": \"eslint:recommended\",\n  \"rules\": {\"semi\": 1}\n}\n"), "{\n  \"extends\": \"eslint:recommended\",\n  \"rules\": {\"semi\": 2}\n}\n"),
    ("plain/pyproject.toml", Some("[project]\nname = \"a\"\nversion = \"1\"\n[tool.pylint.main]\nload-plugins = [\"pylint_django\"]\n"), "[project]\nname = \"a\"\nversion = \"2\"\n[tool.pylint.main]\nload-plugins = [\"pylint_django\"]\n"),
    ("plain/setup.cfg", None, "[metadata]\nname = a\n[flake8]\nmax-line-length = 100\n"),
    ("plain/.rubocop.yml", None, "AllCops:\n  TargetRubyVersion: 3.2\n"),
    ("plain/.editorconfig", None, "root = true\n[*]\nindent_style = space\n"),
    ("src/app.config.js", None, "module.exports = {};\n"),
    ("src/eslint.js", None, "module.exports = {};\n"),
    ("plain/.nycrc", None, "{\"all\": true, \"reporter\": [\"text\"]}\n"),
    ("plain/node_modules/left-pad/index.js", None, "module.exports = 1;\n"),
    ("src/karma.js", None, "module.exports = {};\n"),
    ("docs/jupyter_notes.py", None, "x = 1\n"),
    ("app/package.json", Some("{\"name\": \"a\", \"version\": \"1.0.0\", \"prettier\": {\"semi\": false}}\n"), "{\"name\": \"a\", \"version\": \"1.0.1\", \"prettier\": {\"semi\": false}}\n"),
];

#[test]
fn configurations_the_owners_tools_load_as_code_are_flagged_host_exec_and_plain_settings_are_not() {
    let mut w = ws();
    for (path, old, _) in RUN_ON_THE_HOST.iter().chain(SETTINGS_ONLY) {
        if let Some(old) = old {
            w.real_file(path, old);
        }
    }
    w.restart();
    for (path, _, new) in RUN_ON_THE_HOST.iter().chain(SETTINGS_ONLY) {
        w.layer_file(path, new);
    }
    // A link at a name whose content decides: what the tool reads is
    // behind it, so it is flagged rather than judged by its own text.
    w.real_file("notes.txt", "[MAIN]\ninit-hook='import os'\n");
    w.layer_link("lnk/.pylintrc", "../notes.txt");
    let changes = w.diff();
    let mut missed = Vec::new();
    for (path, _, _) in RUN_ON_THE_HOST.iter().chain(&[("lnk/.pylintrc", None, "")]) {
        if !rules(&changes, path).contains(&"host-exec") {
            missed.push(*path);
        }
    }
    assert!(missed.is_empty(), "not flagged host-exec: {missed:?}");
    let flagged: Vec<&str> = SETTINGS_ONLY
        .iter()
        .map(|(path, _, _)| *path)
        .filter(|path| !rules(&changes, path).is_empty())
        .collect();
    assert!(flagged.is_empty(), "plain settings flagged: {flagged:?}");
}
