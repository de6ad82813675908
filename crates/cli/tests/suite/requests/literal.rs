//! An owner's "always" keeps the request it answered and nothing wider:
//! the sandbox chose its method and path, so their `*`s are kept as
//! stars (`\*`), never read back as wildcards, and a request that no rule
//! can name alone (the method `*`) goes for the run and is not kept.

use crate::common::forge::{reach, Forge};
use crate::common::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn an_always_answer_keeps_the_requests_stars_as_literals_and_allows_no_sibling_path() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let port = up.port.to_string();
    let state = TempDir::new("requests-literal-state");
    let ws = TempDir::new("requests-literal-ws");
    let curl = |label: &str, args: &str| {
        format!("curl -sS --noproxy '*' --path-as-is -o /dev/null -w '{label} %{{http_code}}\\n' {args}; ")
    };
    let u = format!("https://forge.test:{port}");
    let args = |tty: bool, script: &str| -> Vec<String> {
        let mut args: Vec<String> = ["run", if tty { "--no-audit-log" } else { "--no-tty" }]
            .map(String::from)
            .into();
        args.extend(["-w".to_string(), ws.str().to_string()]);
        args.extend(reach(&ca, &port));
        args.extend(
            [
                "--ask-request",
                &format!("* forge.test:{port}/issues/**"),
                "--",
                "sh",
                "-c",
                script,
            ]
            .map(String::from),
        );
        args
    };
    let first = format!(
        "{}{}",
        curl("stars", &format!("'{u}/issues/**'")),
        curl("star-method", &format!("-X '*' {u}/issues/1"))
    );
    let mut term = TestTerminal::open(24, 200);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_STATE_DIR", state.path())
        .args(args(true, &first));
    let mut child = term.spawn(&mut cmd);
    let asked = term.expect("then Enter", Duration::from_secs(30));
    assert!(asked.contains("GET /issues/**"), "{asked}");
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let second = term.expect("then Enter", Duration::from_secs(30));
    assert!(second.contains("* /issues/1"), "{second}");
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let rest = term.expect("star-method", Duration::from_secs(30));
    let status = child.wait().unwrap();
    let all = format!("{asked}{second}{rest}");
    assert!(status.success(), "{all}");
    assert!(all.contains("stars 200"), "{all}");
    assert!(
        all.contains("star-method 200"),
        "allowed for the run: {all}"
    );
    // The grants file holds the one literal request, and no rule for `*`.
    let grants: Vec<_> = std::fs::read_dir(state.path().join("grants"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    let text = std::fs::read_to_string(&grants[0]).unwrap();
    assert!(
        text.contains(&format!(r#""GET forge.test:{port}/issues/\\*\\*""#)),
        "{text}"
    );
    assert!(!text.contains("\"* "), "{text}");
    // The next run, with no one to ask: the same request goes unasked; its
    // siblings, and any method, are held by the ask rule and refused.
    let next = [
        curl("same", &format!("'{u}/issues/**'")),
        curl("sibling", &format!("{u}/issues/1")),
        curl("deeper", &format!("{u}/issues/secret/x")),
        curl("star-method", &format!("-X '*' {u}/issues/1")),
        curl("delete", &format!("-X DELETE '{u}/issues/**'")),
    ]
    .concat();
    let out = Command::new(warden_bin())
        .env("WARDEN_STATE_DIR", state.path())
        .args(args(false, &next))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "same 200",
            "sibling 403",
            "deeper 403",
            "star-method 403",
            "delete 403"
        ],
        "{s}\n{}",
        stderr(&out)
    );
    // A grants file an older warden wrote, the request's `*`s unescaped:
    // its entries read as wildcards, and none is applied.
    std::fs::write(
        &grants[0],
        format!(
            "description: x\ndomains: []\nallow_requests: [\"GET forge.test:{port}/issues/**\", \"* forge.test:{port}/issues/1\"]\n"
        ),
    )
    .unwrap();
    let out = Command::new(warden_bin())
        .env("WARDEN_STATE_DIR", state.path())
        .args(args(false, &next))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert_eq!(
        s.lines().filter(|l| l.ends_with(" 403")).count(),
        5,
        "{s}\n{}",
        stderr(&out)
    );
    let seen = up.requests();
    let arrived: Vec<&String> = seen.iter().filter(|r| !r.contains("/issues/**")).collect();
    assert_eq!(
        arrived.len(),
        1,
        "only the run's own `*` request arrived besides the literal one: {seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|r| r.contains("GET /issues/**")).count(),
        2,
        "{seen:?}"
    );
}
