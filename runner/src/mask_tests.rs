use super::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde_json::json;

const SECRET: &str = "s3cr3t/p@ss word+?";

fn masker() -> Masker {
    Masker::new([SECRET])
}

#[test]
fn a_plain_value_is_masked_everywhere_it_appears() {
    let masked = masker().mask(&format!("a {SECRET} b {SECRET}{SECRET} c"));
    assert_eq!(masked, "a *** b *** c");
}

#[test]
fn a_base64_value_is_masked_alone_and_inside_longer_encodings() {
    assert_eq!(masker().mask(&STANDARD.encode(SECRET)), MASK);
    assert_eq!(masker().mask(&URL_SAFE.encode(SECRET)), MASK);
    // `user:SECRET` as in a Basic authorization header, at each of three alignments:
    // what remains of the encoding carries no more than a few bits of the value.
    for prefix in ["u:", "us:", "use:"] {
        let encoded = STANDARD.encode(format!("{prefix}{SECRET}"));
        let masked = masker().mask(&encoded);
        assert!(masked.contains(MASK), "{prefix}: {encoded} -> {masked}");
        // Left: the prefix's own characters, and at the end a character or two that
        // mix the value's last bits with padding.
        let left = masked.replace(MASK, "");
        let own = (prefix.len() * 8).div_ceil(6);
        assert!(left.len() <= own + 4, "{prefix}: {encoded} -> {masked}");
    }
}

#[test]
fn a_url_encoded_value_is_masked() {
    let query = "https://x.example/?pw=s3cr3t%2Fp%40ss%20word%2B%3F&a=1";
    assert_eq!(masker().mask(query), "https://x.example/?pw=***&a=1");
    let form = "pw=s3cr3t%2Fp%40ss+word%2B%3F&a=1";
    assert_eq!(masker().mask(form), "pw=***&a=1");
}

#[test]
fn a_json_escaped_value_is_masked() {
    let masker = Masker::new(["line one\n\"two\"\\three"]);
    let document = json!({"password": "line one\n\"two\"\\three"}).to_string();
    assert_eq!(masker.mask(&document), r#"{"password":"***"}"#);
}

#[test]
fn short_values_are_not_masked() {
    let masker = Masker::new(["abc", "yes", ""]);
    assert!(masker.is_empty());
    assert_eq!(masker.mask("abc yes"), "abc yes");
    assert_eq!(Masker::new(["abcd"]).mask("abcd"), MASK);
}

#[test]
fn overlapping_and_adjacent_values_leave_no_fragment() {
    let masker = Masker::new(["abcdef", "defghi"]);
    assert_eq!(masker.mask("xx abcdefghi yy"), "xx *** yy");
    let masker = Masker::new(["aaaa"]);
    assert_eq!(masker.mask("aaaaaaa!"), "***!");
}

#[test]
fn json_strings_and_keys_are_masked_and_the_rest_kept() {
    let value = json!({"url": format!("postgres://app:{SECRET}@db/x"), "n": 1,
                       SECRET: [true, SECRET]});
    assert_eq!(
        masker().mask_json(&value),
        json!({"url": "postgres://app:***@db/x", "n": 1, "***": [true, "***"]})
    );
}

#[test]
fn of_env_masks_secrets_and_secret_credentials_not_the_access_key_id() {
    let env = BTreeMap::from([
        (crate::secrets::env_name("db"), "hunter22".to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), "ASIAEXAMPLE".to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY".to_owned(),
            "wJalrXUtnFEMI".to_owned(),
        ),
        ("AWS_SESSION_TOKEN".to_owned(), "FwoGZXIvYXdzEJr".to_owned()),
        ("AWS_REGION".to_owned(), "eu-west-1".to_owned()),
    ]);
    let masked =
        Masker::of_env(&env).mask("hunter22 ASIAEXAMPLE wJalrXUtnFEMI FwoGZXIvYXdzEJr eu-west-1");
    assert_eq!(masked, "*** ASIAEXAMPLE *** *** eu-west-1");
}

#[test]
fn a_masker_never_shows_its_values_in_debug_output() {
    let shown = format!("{:?}", masker());
    assert!(!shown.contains("s3cr3t"), "{shown}");
}

#[test]
fn held_maskers_apply_until_let_go() {
    let masks = Masks::default();
    let plan = masks.hold();
    plan.add(&Masker::new(["plan-secret"]));
    {
        let check = masks.hold();
        check.add(&Masker::new(["drift-secret"]));
        assert_eq!(masks.current().mask("plan-secret drift-secret"), "*** ***");
    }
    assert_eq!(
        masks.current().mask("plan-secret drift-secret"),
        "*** drift-secret"
    );
    drop(plan);
    assert!(masks.current().is_empty());
}

#[test]
fn journaled_results_are_masked_before_they_are_reported() {
    use crate::journal::Stage;
    let masker = masker();
    let diff = |after: &str| {
        let mut diff = outpost_api::PlanDiff::new(format!("sha256:{}", "a".repeat(64)), 0, 1, 0);
        diff.resources.push(outpost_api::ResourceChange {
            address: "terraform_data.db".to_owned(),
            action: outpost_api::ChangeAction::Update,
            fields: vec![outpost_api::FieldChange {
                path: "input".to_owned(),
                before: None,
                after: Some(after.to_owned()),
            }],
            note: None,
        });
        Box::new(diff)
    };
    let applied = Stage::Applied {
        outputs: BTreeMap::from([("dsn".to_owned(), json!(format!("pg://u:{SECRET}@db")))]),
        log: format!("== step x ==\n{SECRET}\n"),
        diff: Some(diff(&format!("\"{SECRET}\""))),
        reason: None,
    }
    .masked(&masker);
    assert_eq!(
        applied,
        Stage::Applied {
            outputs: BTreeMap::from([("dsn".to_owned(), json!("pg://u:***@db"))]),
            log: "== step x ==\n***\n".to_owned(),
            diff: Some(diff("\"***\"")),
            reason: None,
        }
    );
    let awaiting = Stage::Awaiting {
        diff: diff(&format!("\"{SECRET}\"")),
        reason: None,
    }
    .masked(&masker);
    assert_eq!(
        awaiting,
        Stage::Awaiting {
            diff: diff("\"***\""),
            reason: None
        },
        "a diff waiting for approval shows no secret, and keeps its hash"
    );
    let failed = Stage::Failed {
        message: format!("apply failed: bad password {SECRET}"),
    }
    .masked(&masker);
    assert_eq!(
        failed,
        Stage::Failed {
            message: "apply failed: bad password ***".to_owned()
        }
    );
    assert_eq!(Stage::Claimed.masked(&masker), Stage::Claimed);
}
