//! A profile that exists for the daemon's own use (the code interpreter's
//! setup, which reaches PyPI) is named by the owner only: a token holder
//! naming it through the native API, in any place a request names a
//! profile, is refused and no sandbox is made.

use crate::common::daemon::*;

#[test]
fn a_token_holder_cannot_name_the_daemons_own_setup_profile_through_the_native_api() {
    let Some((dir, d)) = over_tcp("own-use") else {
        return;
    };
    let t = token(dir.path(), "writer", &["sandboxes:write", "exec"]);
    let setup = "code-interpreter-v1-setup";
    let attempts = [
        format!(r#"{{"profile":"{setup}","start":false}}"#),
        format!(
            r#"{{"profile":"{setup}","spec":{{"resources":{{"memory":"64M"}}}},"start":false}}"#
        ),
        format!(r#"{{"spec":{{"extends":["{setup}"]}},"start":false}}"#),
        format!(r#"{{"profile":"base","spec":{{"extends":["{setup}"]}},"start":false}}"#),
    ];
    for body in &attempts {
        let (s, b) = call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&t));
        assert_eq!(s, 403, "{body}: {s} {b}");
        let p = json(&b);
        assert_eq!(p["code"], "owner_only", "{body}: {b}");
        // It points at where the request names the profile.
        let at = p["field"].as_str().unwrap_or_default();
        assert!(
            at == "/profile" || at.starts_with("/spec/extends/"),
            "{body}: {b}"
        );
    }
    let (_, b) = call(&d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(json(&b)["sandboxes"], serde_json::json!([]), "{b}");
    // The owner names it (the daemon's own step does): the refusal above
    // is the trust rule's, not an unknown name's.
    let body = format!(r#"{{"name":"owners","profile":"{setup}","start":false}}"#);
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/owners?force=true", None, None);
    assert!(s < 300, "{s} {b}");
}
