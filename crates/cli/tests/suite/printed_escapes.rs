//! What a token or a sandbox chose, as the CLI prints it to the owner's
//! terminal: a workspace path a token made holds terminal escapes (a
//! directory named `ESC]0;OWNED BEL ESC[2J`, committed into the owner's
//! tree and used as a workspace); `warden ls`, `warden --host unix ls`
//! and `warden commit`'s summary line show it escaped, never raw (outside
//! review 26, F8). The lint `lint::printed` keeps every path the CLI
//! prints on the same road.

use crate::common::daemon::Daemon;
use crate::common::*;
use std::path::Path;

/// A directory name that retitles the terminal and clears the screen.
const HOSTILE: &str = "ws\u{1b}]0;OWNED\u{7}\u{1b}[2J";

/// Whether `text` holds an escape or a bell raw.
fn raw(text: &str) -> bool {
    text.contains('\u{1b}') || text.contains('\u{7}')
}

fn shown(o: &std::process::Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

#[test]
fn a_workspace_path_with_terminal_escapes_reaches_no_terminal_through_ls_or_commit() {
    let state = TempDir::new("printed-state");
    let parent = TempDir::new("printed-ws");
    let ws = parent.path().join(HOSTILE);
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("README"), "hi\n").unwrap();
    let ws_arg = ws.to_str().unwrap();
    ok(&warden(state.path(), &["create", "esc", "-w", ws_arg]));
    let listed = warden(state.path(), &["ls"]);
    assert!(listed.status.success(), "{}", shown(&listed));
    // Before: the name went out as it is, retitling the owner's terminal
    // and clearing it.
    assert!(!raw(&shown(&listed)), "warden ls printed an escape raw");
    assert!(
        stdout(&listed).contains("ws\\x1b]0;OWNED\\x07"),
        "{}",
        stdout(&listed)
    );
    // Through the daemon's owner socket.
    let d = Daemon::start(state.path(), false);
    let host = format!("unix:{}", d.socket.display());
    let remote = warden(state.path(), &["--host", &host, "ls"]);
    assert!(remote.status.success(), "{}", shown(&remote));
    assert!(
        !raw(&shown(&remote)),
        "warden --host unix ls printed an escape raw"
    );
    drop(d);
    // A change, committed: the summary line names the workspace.
    ok(&warden(
        state.path(),
        &["exec", "esc", "--no-tty", "--", "sh", "-c", "echo x > new"],
    ));
    ok(&warden(state.path(), &["stop", "esc"]));
    ok(&warden(state.path(), &["diff", "esc"]));
    let committed = warden(state.path(), &["commit", "esc"]);
    assert!(committed.status.success(), "{}", shown(&committed));
    assert!(
        !raw(&shown(&committed)),
        "warden commit printed an escape raw"
    );
    assert!(Path::new(&ws.join("new")).exists());
}
