//! The fifth outside review's attacks on the review flags, through the
//! real binary: a tool-configuration directory made a symbolic link to an
//! unremarkable one (`.claude -> cfg`, `.github/workflows -> ci`), a new
//! extensionless file with one NUL that node loads in place of the
//! reviewed `config.js`, and start-up files the host-exec table missed.
//! Each attack runs in a real overlay sandbox, is judged by
//! `warden diff --json` and committed by `warden commit` (or by the model
//! over MCP) as the review's scripts did.

use crate::common::mcp::{call, good, runtime, stdio_client, text};
use crate::common::review::{
    diff_flag_rules as flag_rules, overlay_run, plain_commit_refuses, rules_of,
};
use crate::common::*;

#[test]
fn a_tool_configuration_directory_made_a_link_is_flagged_and_not_committed_unasked() {
    let state = TempDir::new("r24-link-state");
    let ws = TempDir::new("r24-link-ws");
    let w = ws.path();
    std::fs::write(w.join("app.py"), "print('app')\n").unwrap();
    let script = r#"set -e
mkdir -p cfg husk vsc ci .github gh
printf '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}\n' > cfg/settings.json
printf '#!/bin/sh\ntouch /tmp/pwned\n' > husk/pre-commit
printf '{"tasks":[{"label":"x","command":"id","runOptions":{"runOn":"folderOpen"}}]}\n' > vsc/tasks.json
printf 'on: push\njobs: {}\n' > ci/ci.yml
ln -s cfg .claude
ln -s husk .husky
ln -s ./vsc/../vsc .vscode
ln -s ../ci .github/workflows
mkdir -p gh/workflows && ln -s gh .yarn
ln -s .cursor cursor-link
mkdir .idea
echo plain > notes.txt
"#;
    let name = overlay_run(state.path(), w, script);
    let all = flag_rules(state.path(), &name);
    for (path, rule) in [
        (".claude", "host-exec"),
        (".husky", "host-exec"),
        (".vscode", "host-exec"),
        (".github/workflows", "ci"),
        // A link at a directory above a row's (`.yarn/releases/`).
        (".yarn", "host-exec"),
        // A link whose target is a row's directory.
        ("cursor-link", "host-exec"),
        // A row's directory itself, made new.
        (".idea", "host-exec"),
    ] {
        assert!(
            rules_of(&all, path).iter().any(|r| r == rule),
            "{path} is not flagged {rule}: {all:?}"
        );
    }
    assert!(rules_of(&all, "notes.txt").is_empty(), "{all:?}");
    // What the link redirects to is what Claude Code reads: flagged by
    // that name too (`.claude/settings.json`).
    assert!(
        rules_of(&all, "cfg/settings.json")
            .iter()
            .any(|r| r == "host-exec"),
        "{all:?}"
    );
    plain_commit_refuses(state.path(), &name);
    for p in [".claude", ".husky", ".vscode", ".github"] {
        assert!(w.join(p).symlink_metadata().is_err(), "{p} landed unasked");
    }
}

#[test]
fn the_model_cannot_commit_a_linked_agent_configuration_directory_over_mcp() {
    let state = TempDir::new("r24-mcp-state");
    let ws = TempDir::new("r24-mcp-ws");
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;
        let script = r#"mkdir -p cfg && printf '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}' > cfg/settings.json && ln -s cfg .claude && echo ok"#;
        good(&call(&c, "run_command", serde_json::json!({ "shell": script })).await);
        let changes = good(&call(&c, "get_changes", serde_json::json!({})).await);
        assert!(changes.contains("host-exec"), "{changes}");
        let answer = call(&c, "commit_changes", serde_json::json!({})).await;
        let said = text(&answer);
        assert!(
            ws.path().join(".claude").symlink_metadata().is_err(),
            "the model committed the .claude link: {said}"
        );
        c.cancel().await.unwrap();
    });
}

#[test]
fn a_binary_file_that_is_not_a_known_asset_is_flagged_and_images_and_archives_are_not() {
    let state = TempDir::new("r24-bin-state");
    let ws = TempDir::new("r24-bin-ws");
    let w = ws.path();
    std::fs::write(w.join("config.js"), "module.exports = {port: 80};\n").unwrap();
    std::fs::write(
        w.join("app.js"),
        "const c = require(\"./config\");\nconsole.log(\"app ok\", c.port);\n",
    )
    .unwrap();
    // node's require("./config") tries `config` before `config.js`.
    let script = r#"set -e
printf 'require("fs").writeFileSync("/tmp/pwned","x"); module.exports = {port: 8080};\n// \000\n' > config
mkdir -p lib/tasks ebin
printf 'system("touch /tmp/pwned")\n# \000\n' > lib/tasks/x.rake
printf 'Gem::Specification.new { system("id") }\n# \000\n' > x.gemspec
printf 'lazy val x = { sys.process.Process("id").! }\n// \000\n' > build.sbt
printf 'genrule(cmd = "id")\n# \000\n' > BUILD.bazel
printf 'PK\003\004\000\000' > tool.pyz
printf '<?php __HALT_COMPILER(); \000' > composer.phar
printf ';ELC\027\000\000\000' > init.elc
printf 'FOR1\000\000\000\020BEAM' > ebin/x.beam
printf 'data \000 blob' > data.bin
printf '\211PNG\r\n\032\n\000\000\000\015IHDR\000\002' > icon.png
printf 'wOF2\000\001\000\000' > font.woff2
printf '\037\213\010\000\000\000\000\000' > bundle.tar.gz
printf '%%PDF-1.7\n\000\001' > guide.pdf
"#;
    let name = overlay_run(state.path(), w, script);
    let all = flag_rules(state.path(), &name);
    for path in [
        "config",
        "lib/tasks/x.rake",
        "x.gemspec",
        "build.sbt",
        "BUILD.bazel",
        "tool.pyz",
        "composer.phar",
        "init.elc",
        "ebin/x.beam",
        "data.bin",
    ] {
        assert!(
            rules_of(&all, path).iter().any(|r| r == "binary"),
            "{path} is not flagged binary: {all:?}"
        );
    }
    for path in ["icon.png", "font.woff2", "bundle.tar.gz", "guide.pdf"] {
        assert!(rules_of(&all, path).is_empty(), "{path}: {all:?}");
    }
    plain_commit_refuses(state.path(), &name);
    assert!(!w.join("config").exists(), "the shadowing module landed");
    ok(&warden(
        state.path(),
        &[
            "commit",
            &name,
            "icon.png",
            "font.woff2",
            "bundle.tar.gz",
            "guide.pdf",
        ],
    ));
    assert!(w.join("icon.png").exists());
}

#[test]
fn start_up_files_of_r_ruby_ghci_vim_pdb_bun_dotnet_and_bundler_are_flagged_host_exec() {
    let state = TempDir::new("r24-table-state");
    let ws = TempDir::new("r24-table-ws");
    let w = ws.path();
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    let script = r#"set -e
echo 'system("id")' > .Rprofile
echo 'system("id")' > .irbrc
echo 'system("id")' > .pryrc
echo ':! id' > .ghci
echo '!id' > .vimrc
echo 'import os; os.system("id")' > .pdbrc.py
echo 'preload = ["./x.ts"]' > bunfig.toml
echo '{"sdk":{"paths":["./sdk"]}}' > global.json
echo '<Project><Target Name="x" BeforeTargets="Build"><Exec Command="id"/></Target></Project>' > Directory.Build.props
echo '<Project><Target Name="x" BeforeTargets="Build"><Exec Command="id"/></Target></Project>' > Directory.Build.targets
mkdir -p .bundle sub && echo 'BUNDLE_GEMFILE: "evil.rb"' > .bundle/config
echo 'system("id")' > sub/.irbrc
echo b > a.txt
"#;
    let name = overlay_run(state.path(), w, script);
    let all = flag_rules(state.path(), &name);
    for path in [
        ".Rprofile",
        ".irbrc",
        ".pryrc",
        ".ghci",
        ".vimrc",
        ".pdbrc.py",
        "bunfig.toml",
        "global.json",
        "Directory.Build.props",
        "Directory.Build.targets",
        ".bundle/config",
        "sub/.irbrc",
    ] {
        assert!(
            rules_of(&all, path).iter().any(|r| r == "host-exec"),
            "{path} is not flagged host-exec: {all:?}"
        );
    }
    assert!(rules_of(&all, "a.txt").is_empty(), "{all:?}");
    plain_commit_refuses(state.path(), &name);
    assert!(!w.join(".Rprofile").exists());
}
