//! The check pass over programs of several files (`tests/programs/imports/`): one namespace
//! across the files, and diagnostics rendered against the file each span lies in
//! (snapshots under `check_snapshots/`, `imports__NAME.snap`).

use std::collections::BTreeMap;
use std::path::Path;

use tessel_syntax::{load, Loaded};

fn loaded(rel: &str) -> Loaded {
    let path = format!("../../tests/programs/imports/{rel}");
    load(Path::new(&path)).unwrap_or_else(|e| panic!("{path}: {e:?}"))
}

/// The rendered diagnostics of checking `step` of `rel`, which must fail.
fn check_errors(rel: &str, step: &str) -> String {
    let l = loaded(rel);
    match tessel_passes::check::run(&l.module, step, &BTreeMap::new()) {
        Ok(_) => panic!("{rel} checked without errors"),
        Err(d) => d.iter().map(|d| l.sources.render(d, false)).collect(),
    }
}

#[test]
fn library_fns_and_consts_check_in_the_importer() {
    let l = loaded("mlp_block.tsl");
    // Only the root's steps: the libraries' `norm_alone` and `swiglu_alone` are theirs.
    assert_eq!(tessel_passes::check::steps(&l.module), ["mlp_block"]);
    let dims = BTreeMap::from([("T".to_string(), 3)]);
    tessel_passes::check::run(&l.module, "mlp_block", &dims).expect("checks");
    let d = tessel_passes::check::run(&l.module, "norm_alone", &dims).unwrap_err();
    assert!(d[0].message.contains("no step named `norm_alone`"), "{d:?}");
    let l = loaded("diamond/main.tsl");
    tessel_passes::check::run(&l.module, "both", &BTreeMap::new()).expect("checks");
}

#[test]
fn a_name_defined_in_two_files() {
    insta::with_settings!({ snapshot_path => "check_snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("imports__duplicate", check_errors("errors/duplicate/main.tsl", "s"));
    });
}

#[test]
fn an_error_in_an_imported_fn_is_shown_in_its_file() {
    insta::with_settings!({ snapshot_path => "check_snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("imports__check_in_lib", check_errors("errors/check_in_lib/main.tsl", "s"));
    });
}

/// A new-user trial: `attention` from a library called with 6 query heads over 4 KV heads.
/// The reshape that fails is in the library (lib.tsl line 4); the report must also show the
/// user's call (main.tsl line 6) with the shapes it passed, or nothing points at the user's
/// own mistake.
#[test]
fn an_error_in_an_imported_fn_labels_the_call_in_the_importer() {
    let rendered = check_errors("errors/gqa_heads/main.tsl", "s");
    assert!(rendered.contains("[E0406]"), "{rendered}");
    assert!(
        rendered.contains("errors/gqa_heads/lib.tsl:4:"),
        "the callee's line:\n{rendered}"
    );
    assert!(
        rendered.contains("errors/gqa_heads/main.tsl:6:5"),
        "the call site's line:\n{rendered}"
    );
    assert!(
        rendered.contains(
            "in this call: attention(q: bf16[4, 6, 8], k: bf16[4, 4, 8], v: bf16[4, 4, 8], \
             scale: f32)"
        ),
        "the call's argument types:\n{rendered}"
    );
    assert!(
        rendered.contains("raised while inlining `attention` at the call labelled above"),
        "{rendered}"
    );
    insta::with_settings!({ snapshot_path => "check_snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("imports__gqa_heads", rendered);
    });
}
