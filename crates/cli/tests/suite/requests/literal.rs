//! An owner's "always" keeps the request it answered and nothing wider:
//! the sandbox chose its method and path, so their `*`s are kept as
//! stars (`\*`), never read back as wildcards, and a request that no rule
//! can name alone (the method `*`) goes for the run and is not kept.

use super::{answer_next, asking_on, unasked};
use crate::common::forge::Forge;
use crate::common::*;
use std::time::Duration;

#[test]
fn an_always_answer_keeps_the_requests_stars_as_literals_and_allows_no_sibling_path() {
    let Some(forge) = Forge::start() else { return };
    let port = forge.up.port;
    let state = TempDir::new("requests-literal-state");
    let ws = TempDir::new("requests-literal-ws");
    let curl = |label: &str, args: &str| {
        format!("curl -sS --noproxy '*' --path-as-is -o /dev/null -w '{label} %{{http_code}}\\n' {args}; ")
    };
    let u = format!("https://forge.test:{port}");
    // On the terminal, or with nobody to ask.
    let args = |tty: bool, script: &str| {
        forge.run_args(
            &[
                if tty { "--no-audit-log" } else { "--no-tty" },
                "-w",
                ws.str(),
            ],
            &["--ask-request", "* forge.test:PORT/issues/**"],
            script,
        )
    };
    let first = format!(
        "{}{}",
        curl("stars", &format!("'{u}/issues/**'")),
        curl("star-method", &format!("-X '*' {u}/issues/1"))
    );
    let mut term = TestTerminal::open(24, 200);
    let mut child = asking_on(&term, state.path(), &args(true, &first));
    let asked = answer_next(&mut term, "always");
    assert!(asked.contains("GET /issues/**"), "{asked}");
    let second = answer_next(&mut term, "always");
    assert!(second.contains("* /issues/1"), "{second}");
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
    let out = unasked(state.path(), &args(false, &next));
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
    let out = unasked(state.path(), &args(false, &next));
    let s = stdout(&out);
    assert_eq!(
        s.lines().filter(|l| l.ends_with(" 403")).count(),
        5,
        "{s}\n{}",
        stderr(&out)
    );
    let seen = forge.up.requests();
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
