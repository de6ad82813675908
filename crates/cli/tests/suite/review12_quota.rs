//! Outside review 12, findings 2 and 3, through a real daemon over real
//! HTTP: a token's quotas hold at every way its sandbox comes to run, not
//! only at create (a stopped sandbox's next run may grow its volumes by a
//! disk budget), and a token's sandbox asks no more processes or open
//! files than the host gives one by default.

use crate::common::daemon::{
    api_token, call_on, calls_as, curl_available, e2b_calls_as, json, over_tcp, sandboxes_on_disk,
    with_config, with_small_template, WORKER_SCOPES,
};
use crate::common::*;

/// Finding: a token's sandbox mounting an E2B volume, stopped and started
/// over and over, grew the volume by its disk budget at each run, past
/// the token's disk quota, which only a create asked (4.5 GB against a
/// quota of 32 GB's creates refused). Each start of a token's sandbox,
/// the native start and E2B's connect of one paused to its files alike,
/// is now refused (429 `quota`) once the token's sandboxes, snapshots and
/// volumes hold more than its quota, and nothing starts.
#[test]
fn stop_and_start_cycles_do_not_grow_a_tokens_volume_past_its_disk_quota() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("r12-volume");
    let d = with_small_template(state.path(), "24M");
    let token = api_token(&d, "grow", WORKER_SCOPES, None);
    let e2b = e2b_calls_as(&d, token.clone());
    let native = calls_as(&d, token.clone());
    let (s, b) = e2b("POST", "/volumes", Some(r#"{"name":"grow"}"#));
    assert_eq!(s, 201, "{b}");
    let (s, b) = e2b(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":600,"volumeMounts":[{"name":"grow","path":"/mnt/v"}]}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    let volumes = state.path().join("warden/e2b/volumes");
    let quota = 24u64 << 20;
    let budget = 8u64 << 20;
    // Each run writes 6 MB into the volume, merged there when it stops;
    // then it comes to run again, by E2B's pause to its files and
    // connect or by the native stop and start, in turn (the third, over
    // the quota, is E2B's).
    let mut refused = None;
    for run in 1..=8 {
        let write =
            format!(r#"{{"shell":"head -c 6000000 /dev/zero > /mnt/v/f{run}; echo written"}}"#);
        let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/exec"), Some(&write));
        assert_eq!(s, 200, "{b}");
        assert!(b.contains("written"), "run {run}: {b}");
        let native_turn = run % 2 == 0;
        let (s, b) = if native_turn {
            let (s, b) = native(
                "POST",
                &format!("/v1/sandboxes/{id}/stop"),
                Some(r#"{"grace_seconds":1}"#),
            );
            assert_eq!(s, 200, "{b}");
            native("POST", &format!("/v1/sandboxes/{id}/start"), None)
        } else {
            let (s, b) = e2b(
                "POST",
                &format!("/sandboxes/{id}/pause"),
                Some(r#"{"memory":false}"#),
            );
            assert_eq!(s, 204, "{b}");
            e2b(
                "POST",
                &format!("/sandboxes/{id}/connect"),
                Some(r#"{"timeout":600}"#),
            )
        };
        let held = bytes_under(&volumes);
        assert!(
            held <= quota + budget,
            "after run {run} the token's volume holds {held} bytes, past its quota of {quota} and one run's budget"
        );
        if s != 200 && s != 201 {
            refused = Some((run, native_turn, s, b));
            break;
        }
    }
    let Some((run, native_turn, s, b)) = refused else {
        panic!(
            "eight runs of 6 MB each started, the volume at {} bytes against a quota of {quota}",
            bytes_under(&volumes)
        );
    };
    assert_eq!(s, 429, "run {run}: {b}");
    assert!(run >= 3, "refused before the quota was reached: {b}");
    if native_turn {
        assert_eq!(json(&b)["code"], "quota", "{b}");
        assert_eq!(json(&b)["field"], "/spec/resources/disk", "{b}");
    }
    assert!(b.contains("not started"), "{b}");
    // Nothing runs, by either door.
    let (s, b) = native("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(s, 200, "{b}");
    assert_ne!(json(&b)["state"], "running", "{b}");
    let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/start"), None);
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    let (s, b) = e2b(
        "POST",
        &format!("/sandboxes/{id}/connect"),
        Some(r#"{"timeout":600}"#),
    );
    // Paused to its files for E2B when it was its pause that stopped it
    // (refused again); a native stop is gone for E2B.
    let expected = if native_turn { 404 } else { 429 };
    assert_eq!(s, expected, "{b}");
    // Once what the token holds is back under its quota (the volume's
    // files removed on the host), its sandbox starts again.
    let data = std::fs::read_dir(&volumes)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("data"))
        .next()
        .unwrap();
    for f in std::fs::read_dir(&data).unwrap().flatten() {
        std::fs::remove_file(f.path()).unwrap();
    }
    let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/start"), None);
    assert_eq!(s, 200, "{b}");
}

/// Finding: a token's create asking `resources.pids: 32768` (this host's
/// pid_max) was made and run with it (1,504 processes ran where the
/// default is 1,024), and `open_files: 1000000` was made too: only memory
/// and disk were held to the host's defaults. Both are now refused 422
/// `above_default` at the field's pointer, and nothing is made.
#[test]
fn a_tokens_create_asking_more_processes_or_open_files_than_the_default_is_refused() {
    let Some((state, d)) = over_tcp("r12-pids") else {
        return;
    };
    let token = api_token(&d, "pids", WORKER_SCOPES, None);
    let t = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    for (body, pointer) in [
        (
            r#"{"name":"pids1","spec":{"resources":{"pids":32768}}}"#,
            "/spec/resources/pids",
        ),
        (
            r#"{"name":"pids2","start":false,"spec":{"resources":{"pids":1025}}}"#,
            "/spec/resources/pids",
        ),
        (
            r#"{"name":"files1","start":false,"spec":{"resources":{"open_files":1000000}}}"#,
            "/spec/resources/open_files",
        ),
        (
            r#"{"name":"files2","start":false,"spec":{"resources":{"open_files":4097}}}"#,
            "/spec/resources/open_files",
        ),
    ] {
        let (s, b) = t(body);
        assert_eq!(s, 422, "{body}: {b}");
        assert_eq!(json(&b)["code"], "above_default", "{b}");
        assert_eq!(json(&b)["field"], pointer, "{b}");
    }
    assert!(
        sandboxes_on_disk(state.path()).is_empty(),
        "a refused create left {:?}",
        sandboxes_on_disk(state.path())
    );
    // Less than the default, and the default itself, are made.
    let (s, b) =
        t(r#"{"name":"fewer","start":false,"spec":{"resources":{"pids":64,"open_files":4096}}}"#);
    assert_eq!(s, 201, "{b}");
    // An owner's profile that sets more is the ceiling: the built-in
    // desktop profile's 2,048 processes are a token's to take.
    let (s, b) = t(r#"{"name":"desk","profile":"desktop","start":false}"#);
    assert_eq!(s, 201, "{b}");
    // The owner is held to none of it.
    let (s, b) = call_on(
        &d,
        false,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"owners","start":false,"spec":{"resources":{"pids":4096}}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
}

/// A token's processes together: its sandboxes' `resources.pids` summed
/// are held to `quotas: {pids}`, whatever number of sandboxes the token
/// may have; a create past it is refused 429 `quota` at the field's
/// pointer.
#[test]
fn a_tokens_processes_together_are_held_to_its_pids_quota() {
    let Some((_state, d)) = with_config("r12-pids-sum", "quotas:\n  pids: 1500\n", &[], &[]) else {
        return;
    };
    let token = api_token(&d, "sum", WORKER_SCOPES, None);
    let t = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    let (s, b) = t(r#"{"name":"one","start":false}"#);
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(r#"{"name":"two","start":false}"#);
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/pids", "{b}");
    let (s, b) = t(r#"{"name":"three","start":false,"spec":{"resources":{"pids":400}}}"#);
    assert_eq!(s, 201, "{b}");
}
