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
