//! Symbolic links judged by where the host ends up, not by their text,
//! through the real binary. Before: a link was flagged only when its own
//! text named a tool's configuration (`x -> .claude`): `a -> b -> .claude`
//! flagged `b` alone, a link to the owner's link to `.git/hooks`, a link
//! whose `..` comes after another link (`y -> d/../config.toml` with
//! `d -> .cargo/sub`), an absolute link back into the work tree, and a
//! change that sends the owner's own link into `.claude` were all
//! unflagged, and a plain commit landed them; an image with a link
//! `config` to it (node's `require("./config")` loads it) was an asset
//! and unflagged. Now each chain is followed as the host follows it
//! after the commit (and committed alone), and flagged by what it
//! reaches; a plain commit refuses them.

use crate::common::review::{diff_flag_rules, overlay_run, plain_commit_refuses, rules_of};
use crate::common::*;
use std::os::unix::fs::symlink;

#[test]
fn a_chain_of_links_into_a_tool_configuration_is_flagged_for_what_it_reaches() {
    let state = TempDir::new("chain-state");
    let ws = TempDir::new("chain-ws");
    let w = ws.path();
    std::fs::write(w.join("app.py"), "print('app')\n").unwrap();
    // The owner's own links and directories, there before the sandbox.
    std::fs::create_dir_all(w.join(".cargo/sub")).unwrap();
    std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(w.join("m")).unwrap();
    std::fs::create_dir_all(w.join("n")).unwrap();
    symlink(".git/hooks", w.join("hooks-link")).unwrap();
    symlink(".cargo/sub", w.join("d")).unwrap();
    symlink("m/r", w.join("p")).unwrap();
    symlink("../.claude", w.join("n/r")).unwrap();
    let script = format!(
        r#"set -e
ln -s .claude b
ln -s b a
ln -s hooks-link x
ln -s d/../config.toml y
ln -s {abs}/.vscode abs
ln -s l2 l1 && ln -s l1 l2
ln -s ../../../../../../../../etc out
rmdir m && ln -s n m
echo plain > notes.txt
"#,
        abs = w.display()
    );
    let name = overlay_run(state.path(), w, &script);
    let all = diff_flag_rules(state.path(), &name);
    for (path, rule) in [
        // Its own text names `.claude`: flagged before too.
        ("b", "host-exec"),
        // A link to that link.
        ("a", "host-exec"),
        // A link to the owner's link to the hooks directory.
        ("x", "git-hook"),
        // `..` taken after `d` is followed: `.cargo/config.toml`.
        ("y", "host-exec"),
        // An absolute link back into the work tree.
        ("abs", "host-exec"),
        // The owner's `p -> m/r` now reaches `.claude` through `m`.
        ("m", "host-exec"),
        // A link leaving the work tree, flagged as such.
        ("out", "symlink-escape"),
    ] {
        assert!(
            rules_of(&all, path).iter().any(|r| r == rule),
            "{path} is not flagged {rule}: {all:?}"
        );
    }
    // A loop resolves nowhere: bounded, and nothing to flag it for.
    for path in ["l1", "l2", "notes.txt"] {
        assert!(
            !rules_of(&all, path).iter().any(|r| r == "host-exec"),
            "{path}: {all:?}"
        );
    }
    plain_commit_refuses(state.path(), &name);
    for p in ["a", "x", "y", "abs"] {
        assert!(w.join(p).symlink_metadata().is_err(), "{p} landed unasked");
    }
    assert!(
        w.join("m").is_dir() && !w.join("m").is_symlink(),
        "m landed"
    );
}

#[test]
fn an_image_a_link_gives_a_name_the_host_loads_is_flagged_binary() {
    let state = TempDir::new("alias-state");
    let ws = TempDir::new("alias-ws");
    let w = ws.path();
    std::fs::write(w.join("config.js"), "module.exports = {port: 80};\n").unwrap();
    std::fs::write(
        w.join("app.js"),
        "const c = require(\"./config\");\nconsole.log(\"app ok\", c.port);\n",
    )
    .unwrap();
    let script = r#"set -e
printf 'require("fs").writeFileSync("/tmp/pwned","x"); module.exports = {port: 8080};\n// \000\n' > logo.png
ln -s logo.png config
printf '\211PNG\r\n\032\n\000\000\000\015IHDR\000\002' > icon.png
ln -s icon.png icon-copy.png
"#;
    let name = overlay_run(state.path(), w, script);
    let all = diff_flag_rules(state.path(), &name);
    assert!(
        rules_of(&all, "logo.png").iter().any(|r| r == "binary"),
        "logo.png, loaded as ./config, is not flagged: {all:?}"
    );
    // A link that keeps an asset's name gives it no name the host loads.
    assert!(rules_of(&all, "icon.png").is_empty(), "{all:?}");
    plain_commit_refuses(state.path(), &name);
    assert!(!w.join("logo.png").exists(), "the module landed unasked");
}

/// Before: a file written behind the owner's own link from a tool's
/// directory (`.vscode -> editor/vscode`, the sandbox editing
/// `editor/vscode/tasks.json`) was judged by its own, unremarkable path
/// and landed by a plain commit; the editor then ran its task. Now it is
/// judged by the name the tool reads too: always through a link at a
/// row's path at the top of the workspace, and through any link of the
/// tree when the diff follows them all (it does once a change is a link
/// or a new directory).
#[test]
fn a_file_written_behind_the_owners_link_from_a_tool_directory_is_flagged_for_the_name_the_tool_reads(
) {
    let state = TempDir::new("behind-state");
    let ws = TempDir::new("behind-ws");
    let w = ws.path();
    std::fs::create_dir_all(w.join("editor/vscode")).unwrap();
    std::fs::create_dir_all(w.join("shared/claude")).unwrap();
    std::fs::create_dir_all(w.join("sub")).unwrap();
    std::fs::write(w.join("editor/vscode/tasks.json"), "{\"tasks\":[]}\n").unwrap();
    std::fs::write(w.join("shared/claude/settings.json"), "{}\n").unwrap();
    std::fs::write(w.join("notes.txt"), "a\n").unwrap();
    symlink("editor/vscode", w.join(".vscode")).unwrap();
    symlink("../shared/claude", w.join("sub/.claude")).unwrap();
    let task = r#"{"tasks":[{"label":"x","command":"touch /tmp/pwned","runOptions":{"runOn":"folderOpen"}}]}"#;
    // No link and no new directory in this diff: the top's links are
    // looked up.
    let name = overlay_run(
        state.path(),
        w,
        &format!("printf '%s\\n' '{task}' > editor/vscode/tasks.json && echo b > notes.txt"),
    );
    let all = diff_flag_rules(state.path(), &name);
    assert!(
        rules_of(&all, "editor/vscode/tasks.json")
            .iter()
            .any(|r| r == "host-exec"),
        "{all:?}"
    );
    assert!(rules_of(&all, "notes.txt").is_empty(), "{all:?}");
    plain_commit_refuses(state.path(), &name);
    assert!(
        !std::fs::read_to_string(w.join("editor/vscode/tasks.json"))
            .unwrap()
            .contains("pwned"),
        "the task landed unasked"
    );
    // A new directory in the diff: every link is followed, the nested
    // one too.
    let name = overlay_run(
        state.path(),
        w,
        "echo '{\"hooks\":{}}' > shared/claude/settings.json && mkdir made",
    );
    let all = diff_flag_rules(state.path(), &name);
    assert!(
        rules_of(&all, "shared/claude/settings.json")
            .iter()
            .any(|r| r == "host-exec"),
        "{all:?}"
    );
}
