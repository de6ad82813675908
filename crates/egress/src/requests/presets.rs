//! The shipped presets with request rules, decided as the proxy decides:
//! each one allows what its description promises and refuses the rest.

use super::*;
use crate::secrets::normalise_path;
use warden_policy::compose::BUILTIN_PRESETS;
use warden_policy::profile::parse_preset;

/// A shipped preset's request rules, read as the resolver reads them.
fn preset(name: &str) -> RequestRules {
    let text = BUILTIN_PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no preset {name}"));
    let p = parse_preset(text).unwrap();
    let mut rules = Vec::new();
    for (action, list) in [
        (RequestAction::Allow, &p.allow_requests),
        (RequestAction::Deny, &p.deny_requests),
        (RequestAction::Ask, &p.ask_requests),
    ] {
        for r in list {
            rules.push(RequestRule::parse(action, &r.value).unwrap());
        }
    }
    RequestRules::new(rules)
}

/// `METHOD https://NAME/TARGET` under `rules`, the path read as the
/// terminator reads it.
fn decide(rules: &RequestRules, method: &str, url: &str) -> Outcome {
    let rest = url.strip_prefix("https://").unwrap();
    let (name, target) = rest.split_at(rest.find('/').unwrap());
    let (raw, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let path = normalise_path(raw, false).unwrap();
    rules
        .decide(&Request {
            name,
            port: 443,
            method,
            path: &path,
            query,
            rpc: &Rpc::NoBody,
            params: &Params::None,
        })
        .outcome
}

#[test]
fn every_shipped_preset_rule_parses_and_is_for_a_name_the_preset_allows() {
    for (name, text) in BUILTIN_PRESETS {
        let p = parse_preset(text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let domains: Vec<&str> = p.domains.iter().map(|d| d.value.as_str()).collect();
        for (action, list) in [
            (RequestAction::Allow, &p.allow_requests),
            (RequestAction::Deny, &p.deny_requests),
            (RequestAction::Ask, &p.ask_requests),
        ] {
            for r in list {
                let rule =
                    RequestRule::parse(action, &r.value).unwrap_or_else(|e| panic!("{name}: {e}"));
                // A rule for a name the preset does not allow would never
                // be reached: the name is refused before its requests.
                assert!(
                    domains.iter().any(|d| rule.is_for(d, 443)),
                    "{name}: {:?} is for no name of the preset",
                    r.value
                );
            }
        }
    }
}

#[test]
fn the_forge_preset_clones_and_reads_but_never_pushes_or_writes() {
    let r = preset("github-readonly");
    for (method, url) in [
        (
            "GET",
            "https://github.com/acme/w.git/info/refs?service=git-upload-pack",
        ),
        ("POST", "https://github.com/acme/w.git/git-upload-pack"),
        ("POST", "https://github.com/acme/w/git-upload-pack"),
        (
            "GET",
            "https://api.github.com/repos/acme/w/issues?state=open",
        ),
        ("HEAD", "https://codeload.github.com/acme/w/tar.gz/main"),
        (
            "GET",
            "https://raw.githubusercontent.com/acme/w/main/README.md",
        ),
    ] {
        assert_eq!(decide(&r, method, url), Outcome::Allow, "{method} {url}");
    }
    for (method, url) in [
        (
            "GET",
            "https://github.com/acme/w.git/info/refs?service=git-receive-pack",
        ),
        (
            "GET",
            "https://github.com/acme/w.git/info/refs?x=1&service=git%2Dreceive-pack",
        ),
        ("POST", "https://github.com/acme/w.git/git-receive-pack"),
        ("POST", "https://github.com/acme/w.git/git-receive-pack;x"),
        (
            "POST",
            "https://github.com/acme/w.git/git-upload-pack/../git-receive-pack",
        ),
    ] {
        assert_eq!(decide(&r, method, url), Outcome::Deny, "{method} {url}");
    }
    for (method, url) in [
        ("POST", "https://api.github.com/graphql"),
        ("POST", "https://api.github.com/repos/acme/w/issues"),
        ("PATCH", "https://api.github.com/repos/acme/w/issues/1"),
        ("DELETE", "https://api.github.com/repos/acme/w"),
        ("PUT", "https://api.github.com/repos/acme/w/contents/x"),
        ("POST", "https://github.com/session"),
    ] {
        assert_eq!(decide(&r, method, url), Outcome::NoRule, "{method} {url}");
    }
}

#[test]
fn the_registry_presets_download_but_never_publish() {
    let npm = preset("npm-readonly");
    assert_eq!(
        decide(&npm, "GET", "https://registry.npmjs.org/left-pad"),
        Outcome::Allow
    );
    assert_eq!(
        decide(
            &npm,
            "GET",
            "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz"
        ),
        Outcome::Allow
    );
    assert_eq!(
        decide(
            &npm,
            "POST",
            "https://registry.npmjs.org/-/npm/v1/security/advisories/bulk"
        ),
        Outcome::Allow
    );
    assert_eq!(
        decide(&npm, "PUT", "https://registry.npmjs.org/left-pad"),
        Outcome::Deny
    );
    assert_eq!(
        decide(&npm, "DELETE", "https://registry.npmjs.org/left-pad/-rev/3"),
        Outcome::Deny
    );
    assert_eq!(
        decide(
            &npm,
            "PUT",
            "https://registry.npmjs.org/-/user/org.couchdb.user:me"
        ),
        Outcome::Deny
    );
    assert_eq!(
        decide(&npm, "POST", "https://registry.npmjs.org/left-pad"),
        Outcome::NoRule
    );
    let pypi = preset("pypi-readonly");
    assert_eq!(
        decide(&pypi, "GET", "https://pypi.org/simple/requests/"),
        Outcome::Allow
    );
    assert_eq!(
        decide(
            &pypi,
            "GET",
            "https://files.pythonhosted.org/packages/x/requests.whl"
        ),
        Outcome::Allow
    );
    assert_eq!(
        decide(&pypi, "POST", "https://pypi.org/legacy/"),
        Outcome::NoRule
    );
}

#[test]
fn the_model_api_preset_calls_models_but_never_uploads_files() {
    let r = preset("llm-apis-no-uploads");
    for (method, url) in [
        ("POST", "https://api.anthropic.com/v1/messages"),
        ("POST", "https://api.openai.com/v1/chat/completions"),
        ("POST", "https://api.openai.com/v1/responses"),
        ("POST", "https://api.openai.com/v1/embeddings"),
        ("POST", "https://api.anthropic.com/v1/messages/count_tokens"),
        ("POST", "https://openrouter.ai/api/v1/chat/completions"),
        ("POST", "https://api.mistral.ai/v1/fim/completions"),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1/models/g:streamGenerateContent",
        ),
        ("GET", "https://api.openai.com/v1/files"),
        ("DELETE", "https://api.openai.com/v1/files/f1"),
        ("POST", "https://api.mistral.ai/v1/chat/completions"),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent",
        ),
    ] {
        assert_eq!(decide(&r, method, url), Outcome::Allow, "{method} {url}");
    }
    for (method, url) in [
        ("POST", "https://api.anthropic.com/v1/files"),
        ("POST", "https://api.openai.com/v1/files"),
        ("POST", "https://api.openai.com/v1/uploads"),
        ("POST", "https://api.openai.com/v1/uploads/u1/parts"),
        ("POST", "https://api.openai.com//v1/./files"),
        ("POST", "https://api.openai.com/v1/%66iles"),
        (
            "POST",
            "https://generativelanguage.googleapis.com/upload/v1beta/files",
        ),
        ("POST", "https://api.mistral.ai/v1/files"),
    ] {
        assert_eq!(decide(&r, method, url), Outcome::Deny, "{method} {url}");
    }
    // Endpoints that store what is sent and that no deny rule names (the
    // ones an outside review found reaching the server): not on the allow
    // list, so refused by default.
    for (method, url) in [
        (
            "POST",
            "https://api.mistral.ai/v1/libraries/lib123/documents",
        ),
        ("POST", "https://api.mistral.ai/v1/ocr"),
        ("POST", "https://api.anthropic.com/v1/skills"),
        ("POST", "https://api.anthropic.com/v1/skills/s1/versions"),
        (
            "POST",
            "https://generativelanguage.googleapis.com/v1beta/cachedContents",
        ),
        ("POST", "https://openrouter.ai/api/v1/files"),
        ("POST", "https://api.openai.com/v1/audio/transcriptions"),
        ("POST", "https://api.openai.com/v1/images/edits"),
        ("PUT", "https://api.openai.com/v1/anything-new"),
        ("POST", "https://api.anthropic.com/v1/messages/../files"),
    ] {
        assert_ne!(decide(&r, method, url), Outcome::Allow, "{method} {url}");
    }
}
